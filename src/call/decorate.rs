//! What every attempt carries besides its message: the auth token and, for calls that need a
//! leader, etcd's require-leader metadata (`hasleader=true`: a member without a leader refuses
//! the call at once with `no leader` instead of holding it).

use std::sync::LazyLock;

use tonic::Request;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};

use super::Transport;
use crate::rpc::Rpc;
use crate::token::TokenCell;

/// The require-leader pair, parsed once: `MetadataKey::from_static` checks the name on every
/// call otherwise (~270 instructions of a put, counted by `call-cost`).
static HAS_LEADER: LazyLock<(AsciiMetadataKey, AsciiMetadataValue)> = LazyLock::new(|| {
    (
        AsciiMetadataKey::from_static("hasleader"),
        AsciiMetadataValue::from_static("true"),
    )
});

impl Transport {
    /// Attach the auth token and, for calls that need a leader, `hasleader=true` (unless
    /// `require_leader` overrides the client's option); returns the token generation used and
    /// whether a token went out.
    pub(crate) fn decorate<T>(
        &self,
        rpc: Rpc,
        require_leader: Option<bool>,
        request: &mut Request<T>,
    ) -> (u64, bool) {
        self.decorate_metadata(rpc, require_leader, request.metadata_mut())
    }

    /// [`Transport::decorate`] on bare metadata (requests that arrive as HTTP, through
    /// [`BalancedChannel`](crate::BalancedChannel)).
    pub(crate) fn decorate_metadata(
        &self,
        rpc: Rpc,
        require_leader: Option<bool>,
        metadata: &mut MetadataMap,
    ) -> (u64, bool) {
        if require_leader.unwrap_or(self.options.require_leader) && rpc.requires_leader() {
            let (key, value) = &*HAS_LEADER;
            metadata.insert(key.clone(), value.clone());
        }
        match &self.token {
            Some(cell) => {
                let generation = cell.attach(metadata);
                let sent = metadata.contains_key(crate::token::TOKEN_KEY);
                (generation, sent)
            }
            None => (0, false),
        }
    }

    /// Whether a token can be renewed (credentials were given).
    pub(crate) fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The generation of the token held now (0 without credentials): a stream opened before
    /// this was read carries this token or an older one, so renewing this generation replaces
    /// whatever token the stream carries.
    pub(crate) fn token_generation(&self) -> u64 {
        self.token.as_deref().map_or(0, TokenCell::generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_require_leader_pair_is_what_etcd_reads() {
        let (key, value) = &*HAS_LEADER;
        assert_eq!(
            (key.as_str(), value.to_str().unwrap()),
            ("hasleader", "true")
        );
    }
}
