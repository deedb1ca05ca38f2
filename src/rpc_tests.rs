//! Tests of the RPC table: every row's route, idempotency and path.

use super::*;

#[test]
fn every_path_names_one_rpc() {
    let mut paths = std::collections::HashSet::new();
    for rpc in Rpc::ALL {
        let path = format!("/{}/{}", rpc.service(), rpc.name());
        assert!(paths.insert(path.clone()), "{path} twice");
        assert_eq!(Rpc::from_path(&path), Some(rpc), "{path}");
    }
    // Variants with a flag all sit in ALL through their strict form.
    assert!(Rpc::ALL.contains(&Rpc::Txn { read_only: false }));
    assert_eq!(Rpc::from_path("/etcdserverpb.KV"), None);
    assert_eq!(Rpc::from_path("etcdserverpb.KV/Put"), None);
    assert_eq!(Rpc::from_path("/etcdserverpb.Lease/Put"), None);
}

#[test]
fn paths_match_the_generated_clients() {
    // The generated clients' own path constants, as they go on the wire.
    let generated = [
        include_str!(concat!(env!("OUT_DIR"), "/etcdserverpb.rs")),
        include_str!(concat!(env!("OUT_DIR"), "/v3electionpb.rs")),
        include_str!(concat!(env!("OUT_DIR"), "/v3lockpb.rs")),
    ]
    .concat();
    for rpc in Rpc::ALL {
        let path = format!("\"/{}/{}\"", rpc.service(), rpc.name());
        assert!(
            generated.contains(&path),
            "{path} not in the generated code"
        );
    }
}

#[test]
fn mutations_are_at_most_once() {
    for rpc in [
        Rpc::Put,
        Rpc::DeleteRange,
        Rpc::Txn { read_only: false },
        Rpc::Compact,
        Rpc::MemberAdd,
        Rpc::Lock,
    ] {
        assert_eq!(rpc.idempotency(), Idempotency::AtMostOnce, "{rpc:?}");
        assert!(rpc.requires_leader(), "{rpc:?}");
    }
}

#[test]
fn move_leader_is_sent_at_most_once_and_authenticate_never_hedged() {
    // A MoveLeader sent again after an ambiguous success moves leadership again; every
    // Authenticate attempt costs a bcrypt hash on the server.
    assert_eq!(Rpc::MoveLeader.idempotency(), Idempotency::AtMostOnce);
    assert!(!Rpc::MoveLeader.hedgeable());
    assert_eq!(Rpc::Authenticate.idempotency(), Idempotency::Repeatable);
    assert!(!Rpc::Authenticate.hedgeable());
}

#[test]
fn lease_grant_and_revoke_are_sent_at_most_once() {
    // Issue 8, defect 4: a hedged or retried grant leaves an orphan lease (or answers
    // "lease already exists"), a repeated revoke answers "lease not found".
    for rpc in [Rpc::LeaseGrant, Rpc::LeaseRevoke] {
        assert_eq!(rpc.idempotency(), Idempotency::AtMostOnce, "{rpc:?}");
        assert_eq!(rpc.route(), Route::Leader, "{rpc:?}");
    }
    // Reading lease state or keeping a lease alive stays repeatable.
    for rpc in [Rpc::LeaseKeepAlive, Rpc::LeaseTimeToLive, Rpc::LeaseLeases] {
        assert_eq!(rpc.idempotency(), Idempotency::Repeatable, "{rpc:?}");
    }
}

#[test]
fn watches_spread_but_require_a_leader() {
    assert_eq!(Rpc::Watch.route(), Route::Any);
    assert!(Rpc::Watch.requires_leader());
    assert_eq!(Rpc::Watch.idempotency(), Idempotency::Repeatable);
}

#[test]
fn serializable_reads_go_anywhere_without_leader() {
    let r = Rpc::Range { serializable: true };
    assert_eq!(r.route(), Route::Any);
    assert!(!r.requires_leader());
    let l = Rpc::Range {
        serializable: false,
    };
    assert_eq!(l.route(), Route::Leader);
    assert!(l.requires_leader());
    assert_eq!(l.idempotency(), Idempotency::Repeatable);
}

#[test]
fn a_range_stream_is_routed_as_a_range() {
    for serializable in [false, true] {
        let range = Rpc::Range { serializable };
        let stream = Rpc::RangeStream { serializable };
        assert_eq!(stream.route(), range.route());
        assert_eq!(stream.requires_leader(), range.requires_leader());
        assert_eq!(stream.idempotency(), Idempotency::Repeatable);
        // A chunked read ends by itself: silence on it is the member's, as on a range.
        assert!(!stream.holds_open());
    }
}
