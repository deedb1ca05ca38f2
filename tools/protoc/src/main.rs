//! Prints the path of a `protoc` that ships inside a registry crate, well-known types included.
//!
//! The etcd-ha library needs no `protoc` (its build parses our `.proto` files with protox), but
//! the benchmark's baseline client, the etcd-client crate, runs `protoc` in its build script and
//! imports `google/protobuf/descriptor.proto`. Debian splits those across two packages, and a
//! machine with only one of them fails late with "File not found". `protoc-bin-vendored` ships
//! Google's own binary with its `include/` directory beside it, where `protoc` looks by itself,
//! so `PROTOC=$(cargo run -q -p etcd-ha-protoc)` works on a fresh machine without root.

use std::process::ExitCode;

fn main() -> ExitCode {
    match protoc_bin_vendored::protoc_bin_path() {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            // The crate ships binaries for the common Linux, macOS and Windows targets only.
            eprintln!("etcd-ha-protoc: no protoc is shipped for this platform: {e}");
            ExitCode::FAILURE
        }
    }
}
