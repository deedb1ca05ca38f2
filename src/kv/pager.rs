//! Reading a range in pages at one revision: the rules of [`Kv::get_stream`](super::Kv::get_stream),
//! with no IO.
//!
//! # The rules
//!
//! - Every page reads at one revision: the caller's (`with_revision`), else the first page's
//!   header revision, pinned for the rest. Writes made while the pages are read are not seen,
//!   and a page whose revision was compacted meanwhile fails with `Compacted`: the result is
//!   one snapshot or an error, never a mix. (etcd's own `clientv3/mirror` syncer pages the
//!   same way.)
//! - A page starts right after the last key of the one before (`last + "\0"`, the next key in
//!   etcd's byte order), so pages follow each other only in key order: a custom sort is
//!   refused. Ascending key order is sent as no order: etcd reads the whole rest of the range
//!   to sort it otherwise, for every page.
//! - The caller's limit bounds the whole read, not one page.
//! - The pages may come as plain `Range` answers (`on_page`) or as etcd 3.7's `RangeStream`
//!   chunks (`on_chunk`, header on the last chunk only); the position they leave is the same,
//!   so a read can go on one way after the other (a mixed-version cluster).
//! - An answer must move the read forward (a key past the last one, or the end): a server that
//!   repeats itself ends the read with an error instead of looping.

use crate::error::{Error, Result};
use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::proto::etcdserverpb::{RangeRequest, RangeResponse};
use crate::proto::mvccpb::KeyValue;

/// Keys per page unless the caller says otherwise. 1000: etcd's own `clientv3/mirror` syncer's
/// batch; a few hundred kB of typical values, well under the 2 MiB of a default gRPC answer,
/// and few enough round trips that a large range is not held up by them.
pub(crate) const DEFAULT_PAGE_SIZE: i64 = 1000;

/// Where a paged read is, and what it asks next.
#[derive(Clone, Debug)]
pub(crate) struct Pager {
    /// The caller's request; its `key` moves past each page's last key.
    request: RangeRequest,
    /// Keys asked for per `Range` page.
    page_size: i64,
    /// Keys the caller's limit still allows; `None`: no limit.
    remaining: Option<i64>,
    /// The revision every page reads at, once known.
    revision: Option<i64>,
    /// Nothing more to read.
    done: bool,
}

impl Pager {
    /// A read of what `request` asks for, `page_size` keys per `Range` page. Refused: a page
    /// size below 1, count-only reads (no pages to read) and orders other than by key, ascending.
    pub(crate) fn new(mut request: RangeRequest, page_size: i64) -> Result<Pager> {
        if page_size < 1 {
            return Err(Error::InvalidOptions {
                option: "with_page_size",
                reason: "a page holds at least one key",
            });
        }
        if request.count_only {
            return Err(Error::InvalidOptions {
                option: "with_count_only",
                reason: "get_stream reads key-values; count them with get",
            });
        }
        let by_key = request.sort_target == SortTarget::Key as i32;
        let ascending = [SortOrder::None as i32, SortOrder::Ascend as i32];
        if !by_key || !ascending.contains(&request.sort_order) {
            return Err(Error::InvalidOptions {
                option: "with_sort",
                reason: "get_stream reads in key order, ascending (pages follow each other by key)",
            });
        }
        request.sort_order = SortOrder::None as i32;
        let remaining = (request.limit > 0).then_some(request.limit);
        let revision = (request.revision > 0).then_some(request.revision);
        Ok(Pager {
            request,
            page_size,
            remaining,
            revision,
            done: false,
        })
    }

    /// The revision every page reads at: the caller's, or the first page's; `None` before
    /// the first page when the caller gave none.
    pub(crate) fn revision(&self) -> Option<i64> {
        self.revision
    }

    /// Whether the read is complete.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Whether the rest may be asked as one `RangeStream`: etcd 3.7 refuses one with revision
    /// filters (min/max mod and create revision) as Unimplemented.
    pub(crate) fn streamable(&self) -> bool {
        let r = &self.request;
        r.min_mod_revision == 0
            && r.max_mod_revision == 0
            && r.min_create_revision == 0
            && r.max_create_revision == 0
    }

    /// The next `Range` page: from where the read is, at most a page (and what the caller's
    /// limit still allows), at the pinned revision.
    pub(crate) fn page_request(&self) -> RangeRequest {
        let limit = self
            .remaining
            .map_or(self.page_size, |left| left.min(self.page_size));
        RangeRequest {
            limit,
            revision: self.revision.unwrap_or(0),
            ..self.request.clone()
        }
    }

    /// The rest as one `RangeStream`: from where the read is, what the caller's limit still
    /// allows (the server cuts it into chunks itself), at the pinned revision.
    pub(crate) fn stream_request(&self) -> RangeRequest {
        RangeRequest {
            limit: self.remaining.unwrap_or(0),
            revision: self.revision.unwrap_or(0),
            ..self.request.clone()
        }
    }

    /// A `Range` page answered: the revision is pinned by the first one, and the read ends
    /// when etcd says there is no more (or the caller's limit is reached).
    pub(crate) fn on_page(&mut self, response: RangeResponse) -> Result<Vec<KeyValue>> {
        if self.revision.is_none() {
            match response.header.as_ref().map(|h| h.revision) {
                Some(revision) if revision > 0 => self.revision = Some(revision),
                _ => return Err(malformed("a range page without a header revision")),
            }
        }
        if response.more && response.kvs.is_empty() {
            return Err(malformed(
                "a range page with more keys to come but none in it",
            ));
        }
        let more = response.more;
        let kvs = self.advance(response.kvs)?;
        if !more {
            self.done = true;
        }
        Ok(kvs)
    }

    /// A `RangeStream` chunk answered: its key-values follow the last ones; the chunk with a
    /// header is the last one.
    pub(crate) fn on_chunk(&mut self, response: RangeResponse) -> Result<Vec<KeyValue>> {
        let last = response.header.is_some();
        let kvs = self.advance(response.kvs)?;
        if last {
            self.done = true;
        }
        Ok(kvs)
    }

    /// Take `kvs` as the next ones: the read goes on after the last of them, within the
    /// caller's limit (a server sending more than it is owed is cut short).
    fn advance(&mut self, mut kvs: Vec<KeyValue>) -> Result<Vec<KeyValue>> {
        if let Some(left) = self.remaining {
            kvs.truncate(usize::try_from(left).unwrap_or(usize::MAX));
        }
        if let Some(last) = kvs.last() {
            if self.request.range_end.is_empty() {
                // One key: there is nothing after it to read.
                self.done = true;
            } else if last.key < self.request.key {
                return Err(malformed(
                    "a range answer went back before the keys already read",
                ));
            }
            let mut next = last.key.clone();
            next.push(0);
            self.request.key = next;
        }
        if let Some(left) = &mut self.remaining {
            // Bounded by `left` just above: no underflow.
            *left -= kvs.len() as i64;
            if *left <= 0 {
                self.done = true;
            }
        }
        Ok(kvs)
    }
}

/// An answer no etcd sends: the read ends with it rather than guess.
fn malformed(what: &'static str) -> Error {
    Error::Grpc(tonic::Status::internal(format!(
        "etcd-ha: malformed answer from etcd: {what}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::etcdserverpb::ResponseHeader;

    fn kv(key: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            ..Default::default()
        }
    }

    fn page(revision: i64, keys: &[&str], more: bool) -> RangeResponse {
        RangeResponse {
            header: Some(ResponseHeader {
                revision,
                ..Default::default()
            }),
            kvs: keys.iter().map(|k| kv(k)).collect(),
            more,
            count: 0,
        }
    }

    fn chunk(keys: &[&str], last: bool) -> RangeResponse {
        RangeResponse {
            header: last.then(ResponseHeader::default),
            kvs: keys.iter().map(|k| kv(k)).collect(),
            ..Default::default()
        }
    }

    fn prefix(key: &str) -> RangeRequest {
        RangeRequest {
            key: key.into(),
            range_end: crate::prefix_end(key.as_bytes()),
            ..Default::default()
        }
    }

    fn keys(kvs: &[KeyValue]) -> Vec<String> {
        kvs.iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
            .collect()
    }

    #[test]
    fn pages_pin_the_first_revision_and_start_after_the_last_key() {
        let mut pager = Pager::new(prefix("p/"), 2).unwrap();
        let first = pager.page_request();
        assert_eq!(
            (first.key.as_slice(), first.limit, first.revision),
            (&b"p/"[..], 2, 0)
        );
        let got = pager.on_page(page(40, &["p/a", "p/b"], true)).unwrap();
        assert_eq!(keys(&got), ["p/a", "p/b"]);
        assert_eq!(pager.revision(), Some(40));
        let second = pager.page_request();
        assert_eq!(second.key, b"p/b\0");
        assert_eq!(second.range_end, b"p0");
        assert_eq!(second.revision, 40);
        // A later page's header shows the store's newer revision: the pin stays.
        pager.on_page(page(45, &["p/c"], false)).unwrap();
        assert_eq!(pager.revision(), Some(40));
        assert!(pager.is_done());
    }

    #[test]
    fn the_callers_revision_and_limit_bound_the_whole_read() {
        let request = RangeRequest {
            revision: 7,
            limit: 3,
            ..prefix("p/")
        };
        let mut pager = Pager::new(request, 2).unwrap();
        assert_eq!(pager.revision(), Some(7));
        assert_eq!(pager.page_request().revision, 7);
        pager.on_page(page(9, &["p/a", "p/b"], true)).unwrap();
        assert_eq!(pager.revision(), Some(7));
        // One key left of the limit: the page asks for one, the stream for one.
        assert_eq!(pager.page_request().limit, 1);
        assert_eq!(pager.stream_request().limit, 1);
        // A server sending more than owed is cut to the limit, and the read ends.
        let got = pager.on_chunk(chunk(&["p/c", "p/d"], false)).unwrap();
        assert_eq!(keys(&got), ["p/c"]);
        assert!(pager.is_done());
    }

    #[test]
    fn chunks_end_with_the_one_that_has_a_header_and_can_follow_pages() {
        let mut pager = Pager::new(prefix("p/"), 1).unwrap();
        pager.on_page(page(12, &["p/a"], true)).unwrap();
        let rest = pager.stream_request();
        assert_eq!(
            (rest.key.as_slice(), rest.limit, rest.revision),
            (&b"p/a\0"[..], 0, 12)
        );
        assert_eq!(
            keys(&pager.on_chunk(chunk(&["p/b", "p/c"], false)).unwrap()),
            ["p/b", "p/c"]
        );
        assert!(!pager.is_done());
        // A stream broken here goes on from after p/c, by stream or by page.
        assert_eq!(pager.stream_request().key, b"p/c\0");
        assert_eq!(pager.page_request().key, b"p/c\0");
        assert!(pager.on_chunk(chunk(&[], true)).unwrap().is_empty());
        assert!(pager.is_done());
    }

    #[test]
    fn one_key_is_one_page() {
        let one = RangeRequest {
            key: b"k".to_vec(),
            ..Default::default()
        };
        let mut pager = Pager::new(one, 10).unwrap();
        pager.on_page(page(3, &["k"], false)).unwrap();
        assert!(pager.is_done());
        // Even from a chunk that does not say so.
        let one = RangeRequest {
            key: b"k".to_vec(),
            revision: 3,
            ..Default::default()
        };
        let mut pager = Pager::new(one, 10).unwrap();
        pager.on_chunk(chunk(&["k"], false)).unwrap();
        assert!(pager.is_done());
    }

    #[test]
    fn key_order_only_and_ascending_is_sent_as_no_order() {
        let sorted = |target: SortTarget, order: SortOrder| RangeRequest {
            sort_target: target as i32,
            sort_order: order as i32,
            ..prefix("p/")
        };
        let pager = Pager::new(sorted(SortTarget::Key, SortOrder::Ascend), 5).unwrap();
        assert_eq!(pager.page_request().sort_order, SortOrder::None as i32);
        for (target, order) in [
            (SortTarget::Key, SortOrder::Descend),
            (SortTarget::Mod, SortOrder::Ascend),
            (SortTarget::Value, SortOrder::None),
        ] {
            let refused = Pager::new(sorted(target, order), 5).unwrap_err();
            assert!(
                matches!(
                    refused,
                    Error::InvalidOptions {
                        option: "with_sort",
                        ..
                    }
                ),
                "{target:?} {order:?}: {refused:?}"
            );
        }
        let count = RangeRequest {
            count_only: true,
            ..prefix("p/")
        };
        assert!(Pager::new(count, 5).is_err());
        assert!(Pager::new(prefix("p/"), 0).is_err());
    }

    #[test]
    fn revision_filters_are_paged_not_streamed() {
        assert!(Pager::new(prefix("p/"), 5).unwrap().streamable());
        let filtered = RangeRequest {
            min_mod_revision: 4,
            ..prefix("p/")
        };
        assert!(!Pager::new(filtered, 5).unwrap().streamable());
    }

    #[test]
    fn answers_that_do_not_move_the_read_forward_end_it() {
        let mut pager = Pager::new(prefix("p/"), 2).unwrap();
        let headless = RangeResponse {
            kvs: vec![kv("p/a")],
            ..Default::default()
        };
        assert!(pager.on_page(headless).is_err());
        // More to come, but nothing in the page: it would be asked again forever.
        assert!(pager.on_page(page(5, &[], true)).is_err());
        let mut pager = Pager::new(prefix("p/"), 2).unwrap();
        pager.on_page(page(5, &["p/a", "p/b"], true)).unwrap();
        // A page that goes back before the keys already read.
        assert!(pager.on_page(page(5, &["p/a"], true)).is_err());
    }
}
