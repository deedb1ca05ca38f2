//! Small helpers on etcd's answers: keys and values as text, the first key of a range.
//!
//! etcd keys and values are bytes; most applications store UTF-8 in them. These are inherent
//! methods on the generated types (they live in this crate), so nothing needs importing.

use std::str::Utf8Error;

use crate::proto::etcdserverpb::RangeResponse;
use crate::proto::mvccpb::KeyValue;

impl KeyValue {
    /// The key as UTF-8 text, or why it is not.
    ///
    /// ```
    /// use etcd_ha::proto::mvccpb::KeyValue;
    /// let kv = KeyValue { key: b"config/mode".to_vec(), ..Default::default() };
    /// assert_eq!(kv.key_str(), Ok("config/mode"));
    /// ```
    pub fn key_str(&self) -> Result<&str, Utf8Error> {
        std::str::from_utf8(&self.key)
    }

    /// The value as UTF-8 text, or why it is not.
    ///
    /// ```
    /// use etcd_ha::proto::mvccpb::KeyValue;
    /// let kv = KeyValue { value: vec![0xff], ..Default::default() };
    /// assert!(kv.value_str().is_err());
    /// ```
    pub fn value_str(&self) -> Result<&str, Utf8Error> {
        std::str::from_utf8(&self.value)
    }
}

impl RangeResponse {
    /// The first key-value of the answer (the only one for a single-key get), if any.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let got = client.kv().get("config/mode", etcd_ha::GetOptions::new()).await?;
    /// if let Some(kv) = got.first() {
    ///     println!("mode = {:?}", kv.value_str());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn first(&self) -> Option<&KeyValue> {
        self.kvs.first()
    }

    /// The first key-value of the answer, taken out of it.
    ///
    /// ```
    /// use etcd_ha::proto::{etcdserverpb::RangeResponse, mvccpb::KeyValue};
    /// let got = RangeResponse { kvs: vec![KeyValue::default()], count: 1, ..Default::default() };
    /// assert!(got.into_first().is_some());
    /// ```
    pub fn into_first(self) -> Option<KeyValue> {
        self.kvs.into_iter().next()
    }

    /// Every `(key, value)` of the answer as UTF-8 text, in order; an item is an error when its
    /// key or value is not UTF-8.
    ///
    /// ```
    /// use etcd_ha::proto::{etcdserverpb::RangeResponse, mvccpb::KeyValue};
    /// let kv = |k: &str, v: &str| KeyValue {
    ///     key: k.into(),
    ///     value: v.into(),
    ///     ..Default::default()
    /// };
    /// let got = RangeResponse { kvs: vec![kv("a", "1"), kv("b", "2")], ..Default::default() };
    /// let pairs: Result<Vec<_>, _> = got.kvs_str().collect();
    /// assert_eq!(pairs.unwrap(), [("a", "1"), ("b", "2")]);
    /// ```
    pub fn kvs_str(&self) -> impl Iterator<Item = Result<(&str, &str), Utf8Error>> {
        self.kvs
            .iter()
            .map(|kv| Ok((kv.key_str()?, kv.value_str()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &[u8], value: &[u8]) -> KeyValue {
        KeyValue {
            key: key.to_vec(),
            value: value.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn text_views_and_their_errors() {
        let good = kv(b"k", "v\u{e9}".as_bytes());
        assert_eq!(good.key_str(), Ok("k"));
        assert_eq!(good.value_str(), Ok("v\u{e9}"));
        let bad = kv(b"\xff\xfe", b"v");
        assert_eq!(bad.key_str().unwrap_err().valid_up_to(), 0);
        assert_eq!(bad.value_str(), Ok("v"));
    }

    #[test]
    fn first_and_pairs() {
        let empty = RangeResponse::default();
        assert!(empty.first().is_none());
        assert!(empty.kvs_str().next().is_none());
        assert!(empty.into_first().is_none());

        let got = RangeResponse {
            kvs: vec![kv(b"a", b"1"), kv(b"b", b"\xff"), kv(b"c", b"3")],
            count: 3,
            ..Default::default()
        };
        assert_eq!(got.first().unwrap().key, b"a");
        let pairs: Vec<_> = got.kvs_str().collect();
        assert_eq!(pairs[0], Ok(("a", "1")));
        assert!(pairs[1].is_err());
        assert_eq!(pairs[2], Ok(("c", "3")));
        assert_eq!(got.into_first().unwrap().value, b"1");
    }
}
