//! Rebuild the library when a migration is added or changed: `sqlx::migrate!` embeds the
//! `migrations/` folder at compile time, and cargo does not know the macro read it, so without
//! this a new migration file left an incremental build without it.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
