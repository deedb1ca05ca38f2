//! The txn every steady-state benchmark makes (`call-cost`, `overhead-bench`), one shape for
//! every client: if the key exists, put it again, else read it (etcd's compare-and-swap shape).

use etcd_ha::proto::etcdserverpb::{
    Compare, PutRequest, RangeRequest, RequestOp, TxnRequest, compare, request_op,
};

/// The txn as etcd's generated client sends it (bare channel, `BalancedChannel`).
pub fn raw(key: &[u8], value: &[u8]) -> TxnRequest {
    TxnRequest {
        compare: vec![Compare {
            key: key.to_vec(),
            result: compare::CompareResult::Greater as i32,
            target: compare::CompareTarget::Version as i32,
            target_union: Some(compare::TargetUnion::Version(0)),
            ..Default::default()
        }],
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: key.to_vec(),
                value: value.to_vec(),
                ..Default::default()
            })),
        }],
        failure: vec![RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                key: key.to_vec(),
                ..Default::default()
            })),
        }],
    }
}

/// The txn through etcd-ha's typed API.
pub async fn ha(kv: &etcd_ha::Kv, key: Vec<u8>, value: Vec<u8>) -> etcd_ha::Result<()> {
    let txn = etcd_ha::Txn::new()
        .when([etcd_ha::Compare::version(
            key.clone(),
            etcd_ha::CompareOp::Greater,
            0,
        )])
        .and_then([etcd_ha::TxnOp::put(
            key.clone(),
            value,
            etcd_ha::PutOptions::new(),
        )])
        .or_else([etcd_ha::TxnOp::get(key, etcd_ha::GetOptions::new())]);
    kv.txn(txn).await.map(drop)
}

/// The txn through the etcd-client crate.
pub async fn ec(
    kv: &mut etcd_client::KvClient,
    key: Vec<u8>,
    value: Vec<u8>,
) -> Result<(), etcd_client::Error> {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let txn = Txn::new()
        .when([Compare::version(key.clone(), CompareOp::Greater, 0)])
        .and_then([TxnOp::put(key.clone(), value, None)])
        .or_else([TxnOp::get(key, None)]);
    kv.txn(txn).await.map(drop)
}
