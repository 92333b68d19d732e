//! proto
extern crate self as outbox_plugin_sdk;
#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::*;
    pub use wit_bindgen;
}
mod bindings;
