//! Compiles our etcd v3 `.proto` files into Rust with tonic-prost-build.
//!
//! protox parses the files in pure Rust, so a fresh machine needs no system `protoc`.

use std::path::PathBuf;

/// Every file we compile; imports between them resolve against `proto/`.
const PROTOS: &[&str] = &[
    "proto/mvccpb/kv.proto",
    "proto/authpb/auth.proto",
    "proto/etcdserverpb/rpc.proto",
    "proto/v3electionpb/v3election.proto",
    "proto/v3lockpb/v3lock.proto",
];

/// Messages that carry a password or a token: their `Debug` is written by hand in
/// `src/redact.rs` so that logging a request never leaks a credential.
const SECRET_MESSAGES: &[&str] = &[
    ".etcdserverpb.AuthenticateRequest",
    ".etcdserverpb.AuthenticateResponse",
    ".etcdserverpb.AuthUserAddRequest",
    ".etcdserverpb.AuthUserChangePasswordRequest",
    ".authpb.User",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        // We are only a client; server stubs would be dead code.
        .build_server(false)
        .build_client(true)
        .skip_debug(SECRET_MESSAGES)
        .out_dir(&out)
        .compile_fds(descriptors)?;
    Ok(())
}
