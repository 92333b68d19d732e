//! Rebuild the `outbox` binary when a file it embeds changes: the plugin SDK and its WIT package
//! (`outbox plugins sdk|wit`) and the scaffold templates (`outbox plugins new`). `include_dir!`
//! does not tell cargo which files it read.

fn main() {
    println!("cargo::rerun-if-changed=../plugin-sdk/Cargo.toml");
    println!("cargo::rerun-if-changed=../plugin-sdk/README.md");
    println!("cargo::rerun-if-changed=../plugin-sdk/src");
    println!("cargo::rerun-if-changed=../plugin-sdk/wit");
    println!("cargo::rerun-if-changed=templates");
}
