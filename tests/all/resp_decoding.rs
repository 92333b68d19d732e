//! The patched RESP decoder (`vendor/redis`, see its `VENDORED.md`): replies already whole in
//! the read buffer are decoded directly, a reply cut short is measured again as more of it
//! arrives (a few times, then it is left to `combine`), anything else goes to `combine` as
//! before. Checked through a real multiplexed connection, the one the host uses, against the
//! crate's own unpatched `parse_redis_value` on the same bytes: a server on a local socket
//! answers each command with bytes this test chose (a real Redis cannot be made to send
//! arbitrary or malformed replies), cut at random places and sent in pieces, so replies arrive
//! whole, split, and several to a read.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::aio::ConnectionLike;
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A random RESP value at nesting `depth`: the types the direct decoder takes, RESP3 types it
/// leaves to `combine`, and bytes that look like RESP inside bulk strings.
fn random_reply(rng: &mut StdRng, depth: usize) -> Vec<u8> {
    let kinds = if depth >= 4 { 8 } else { 10 };
    match rng.random_range(0..kinds) {
        0 => b"+OK\r\n".to_vec(),
        1 => {
            let text: String = (0..rng.random_range(0..12))
                .map(|_| ['a', ' ', 'é', '7', '\r', ':', '$'][rng.random_range(0..7)])
                .collect();
            // A simple string ends at the first CRLF: a lone '\r' stays inside it.
            format!("+{}\r\n", text.replace("\r", "\r ")).into_bytes()
        }
        2 => {
            let n: i64 = match rng.random_range(0..4) {
                0 => i64::MIN,
                1 => i64::MAX,
                2 => rng.random_range(-1000..1000),
                _ => rng.random(),
            };
            if rng.random_bool(0.1) {
                format!(": {n} \r\n").into_bytes()
            } else {
                format!(":{n}\r\n").into_bytes()
            }
        }
        3 | 4 => {
            let body: Vec<u8> = (0..rng.random_range(0..40))
                .map(|_| [b'\r', b'\n', b'*', b'$', b'x', 0xff, 0][rng.random_range(0..7)])
                .collect();
            let mut reply = format!("${}\r\n", body.len()).into_bytes();
            reply.extend_from_slice(&body);
            reply.extend_from_slice(b"\r\n");
            reply
        }
        5 => [
            &b"$-1\r\n"[..],
            b"*-1\r\n",
            b"_\r\n",
            b"$0\r\n\r\n",
            b"*0\r\n",
        ][rng.random_range(0..5)]
        .to_vec(),
        6 => [
            &b"%1\r\n+key\r\n:1\r\n"[..],
            b",3.25\r\n",
            b"#t\r\n",
            b"(12345678901234567890\r\n",
            b"~2\r\n:1\r\n:2\r\n",
            b"=8\r\ntxt:abcd\r\n",
        ][rng.random_range(0..6)]
        .to_vec(),
        7 => {
            // A stream entry as XREADGROUP returns it: the shape the host reads most.
            let mut reply = b"*2\r\n$15\r\n1796658712559-2\r\n*4\r\n".to_vec();
            for field in ["event_id", "5003", "payload", "{\"user\": 3}"] {
                reply.extend_from_slice(format!("${}\r\n{field}\r\n", field.len()).as_bytes());
            }
            reply
        }
        _ => {
            let length = rng.random_range(0..6);
            let mut reply = format!("*{length}\r\n").into_bytes();
            for _ in 0..length {
                reply.extend(random_reply(rng, depth + 1));
            }
            reply
        }
    }
}

/// What the unpatched parser makes of `bytes`, as a connection hands it over (an error reply
/// anywhere in it is the command's error).
fn expected(bytes: &[u8]) -> Result<Value, String> {
    redis::parse_redis_value(bytes)
        .and_then(Value::extract_error)
        .map_err(|e| e.to_string())
}

/// A server that answers each command with the next reply from `replies`, cut into pieces at
/// random places (the `CLIENT SETINFO` commands a connection starts with get `+OK`).
async fn scripted_server(seed: u64) -> (String, mpsc::UnboundedSender<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    let (replies, mut next) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let mut rng = StdRng::seed_from_u64(seed);
        while let Ok((mut socket, _)) = listener.accept().await {
            // Each piece leaves at once, not held back until the last one is acknowledged.
            socket.set_nodelay(true).unwrap();
            let mut read = Vec::new();
            loop {
                let commands = whole_commands(&mut read);
                let mut out = Vec::new();
                for command in commands {
                    if command.first().is_some_and(|name| name == "REPLY") {
                        match next.recv().await {
                            Some(reply) => out.extend(reply),
                            None => return,
                        }
                    } else {
                        out.extend_from_slice(b"+OK\r\n");
                    }
                }
                if !out.is_empty() && send_in_pieces(&mut socket, &out, &mut rng).await.is_err() {
                    break;
                }
                let mut chunk = [0u8; 4096];
                match socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read.extend_from_slice(&chunk[..n]),
                }
            }
        }
    });
    (url, replies)
}

/// The commands whole in `read` (arrays of bulk strings, as clients send them), taken out of it.
fn whole_commands(read: &mut Vec<u8>) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    while let Ok(Value::Array(parts)) = redis::parse_redis_value(read) {
        let mut used = 0;
        let mut command = Vec::new();
        for part in &parts {
            if let Value::BulkString(bytes) = part {
                used += format!("${}\r\n", bytes.len()).len() + bytes.len() + 2;
                command.push(String::from_utf8_lossy(bytes).into_owned());
            }
        }
        used += format!("*{}\r\n", parts.len()).len();
        read.drain(..used);
        commands.push(command);
    }
    commands
}

/// Write `bytes` in pieces cut at random places, each flushed and followed by a pause, so the
/// client reads them separately: up to four pieces mostly, now and then up to twenty (more
/// reads than the decoder measures a reply in before it leaves it to `combine`).
async fn send_in_pieces(
    socket: &mut TcpStream,
    bytes: &[u8],
    rng: &mut StdRng,
) -> std::io::Result<()> {
    let most = if rng.random_bool(0.15) { 20 } else { 4 };
    let mut cuts: Vec<usize> = (0..rng.random_range(0..most))
        .map(|_| rng.random_range(0..=bytes.len()))
        .collect();
    cuts.sort_unstable();
    let mut from = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        socket.write_all(&bytes[from..cut]).await?;
        socket.flush().await?;
        from = cut;
        tokio::time::sleep(Duration::from_micros(300)).await;
    }
    Ok(())
}

#[tokio::test]
async fn resp_replies_decode_the_same_whole_or_split() {
    let (url, replies) = scripted_server(7).await;
    let client = redis::Client::open(url).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    for case in 0..400 {
        // One command at a time, or several pipelined: their replies share reads.
        let batch = if case % 3 == 0 {
            rng.random_range(2..6)
        } else {
            1
        };
        let sent: Vec<Vec<u8>> = (0..batch).map(|_| random_reply(&mut rng, 0)).collect();
        for reply in &sent {
            replies.send(reply.clone()).unwrap();
        }
        let command = redis::cmd("REPLY").arg(case).clone();
        let answers = futures::future::join_all(sent.iter().map(|_| {
            let mut conn = conn.clone();
            let command = command.clone();
            async move {
                conn.req_packed_command(&command)
                    .await
                    .map_err(|e| e.to_string())
            }
        }))
        .await;
        for (reply, got) in sent.iter().zip(answers) {
            assert_eq!(
                got,
                expected(reply),
                "case {case}: {:?}",
                String::from_utf8_lossy(reply)
            );
        }
    }
}

#[tokio::test]
async fn malformed_resp_replies_fail_the_connection_as_before() {
    let deep = format!("{}:1\r\n", "*1\r\n".repeat(101));
    let malformed: [&[u8]; 5] = [
        b"$3\r\nabcd\r\n",
        b":12x\r\n",
        b"+\xff\xfe\r\n",
        b"?what\r\n",
        deep.as_bytes(),
    ];
    for (case, reply) in malformed.into_iter().enumerate() {
        assert!(
            expected(reply).is_err(),
            "case {case} is refused by the parser"
        );
        let (url, replies) = scripted_server(case as u64).await;
        let client = redis::Client::open(url).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        replies.send(reply.to_vec()).unwrap();
        let got = tokio::time::timeout(
            Duration::from_secs(10),
            conn.req_packed_command(&redis::cmd("REPLY")),
        )
        .await
        .expect("a malformed reply fails the command, it does not hang it");
        assert!(got.is_err(), "case {case}: {got:?}");
    }
}
