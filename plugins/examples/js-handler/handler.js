// Example outbox handler plugin in JavaScript (world `handler` of `outbox:plugin@0.2.0`).
//
// Built into a WebAssembly component by ComponentizeJS (via `jco componentize`): see build.sh
// and package.json beside this file. The imports below are the WIT interfaces of
// ../../../plugin-sdk/wit/outbox.wit; the export `handlerApi` is its `handler-api` interface
// (jco names an exported interface by its lower camel case name).
//
// Value mapping (jco): s64/u64 are BigInt; option<T> is the value or undefined; a variant is
// `{ tag, val }`; an enum is its case name as a string; an imported function returning
// `result<T, E>` returns T or throws an error whose `payload` is E.
//
// Behaviour, chosen by the payload's `action` (default "ok"), the same as the other languages'
// examples:
//   ok           count the event in kv ("seen"), log it, publish `child_type` if configured
//   retry        retry("asked to retry")
//   retry-after  retry-after 1500 ms
//   fail         fail("asked to fail")
//   spin         compute forever (the host's fuel / time limit stops it)
//   hog          allocate without bound (the host's memory cap stops it)
//   sleep        sleep 30 s (the host's wall-clock limit cuts it)

import { write } from "outbox:plugin/log@0.2.0";
import { send } from "outbox:plugin/publish@0.2.0";
import { increment } from "outbox:plugin/kv@0.2.0";

const ok = () => ({ tag: "ok" });
const retry = (reason) => ({ tag: "retry", val: reason });
const fail = (reason) => ({ tag: "fail", val: reason });

/** `denied: ...` or `failed: ...`, as the Rust SDK's HostError prints. */
function hostErrorText(e) {
  const err = e && typeof e === "object" && "payload" in e ? e.payload : e;
  if (err && typeof err === "object" && typeof err.tag === "string") {
    return `${err.tag}: ${err.val}`;
  }
  return String(err && err.message !== undefined ? err.message : err);
}

function errorText(e) {
  return e && e.message !== undefined ? e.message : String(e);
}

function handle(config, delivery) {
  let cfg;
  try {
    cfg = config.trim() ? JSON.parse(config) : {};
  } catch (e) {
    return fail(`invalid plugin config: ${errorText(e)}`);
  }
  if (cfg === null || typeof cfg !== "object" || Array.isArray(cfg)) {
    return fail("invalid plugin config: expected a JSON object");
  }
  const childType = cfg.child_type;
  if (childType !== undefined && childType !== null && typeof childType !== "string") {
    return fail("invalid plugin config: child_type must be a string");
  }

  const event = delivery.event;
  let payload;
  try {
    payload = JSON.parse(event.payload);
  } catch (e) {
    return fail(`malformed payload: ${errorText(e)}`);
  }
  if (payload === null || typeof payload !== "object" || Array.isArray(payload)) {
    return fail("malformed payload: expected a JSON object");
  }

  const action = payload.action ?? "ok";
  switch (action) {
    case "ok": {
      let count;
      try {
        count = increment("seen", 1n, undefined);
      } catch (e) {
        return retry(`kv: ${hostErrorText(e)}`);
      }
      write("info", `event ${event.id} (${event.eventType}) seen ${count} times`);
      if (childType) {
        // JSON.stringify cannot write a BigInt: both are s64, written as plain JSON numbers.
        const child = `{"parent":${event.id},"count":${count}}`;
        try {
          send({ eventType: childType, payload: child, tenantId: undefined, headers: undefined });
        } catch (e) {
          return retry(`publishing ${childType}: ${hostErrorText(e)}`);
        }
      }
      return ok();
    }
    case "retry":
      return retry("asked to retry");
    case "retry-after":
      return { tag: "retry-after", val: { reason: "asked to retry later", delayMs: 1500n } };
    case "fail":
      return fail("asked to fail");
    case "spin": {
      let n = 0;
      for (;;) {
        n = (n * 31 + 7) % 1000003;
      }
    }
    case "hog": {
      const hoard = [];
      for (;;) {
        const block = new Uint8Array(1 << 20);
        block.fill(1); // touch it, so the engine cannot keep it lazy
        hoard.push(block);
      }
    }
    case "sleep": {
      return new Promise((resolve) => setTimeout(() => resolve(ok()), 30000));
    }
    default:
      return fail(`unknown action ${action}`);
  }
}

export const handlerApi = { handle };
