//! `Debug` for the generated messages that carry passwords or tokens: the secret is redacted.

use std::fmt;

use crate::proto::authpb::User;
use crate::proto::etcdserverpb::{
    AuthUserAddRequest, AuthUserChangePasswordRequest, AuthenticateRequest, AuthenticateResponse,
};

/// What a redacted field shows instead of its value.
const REDACTED: &str = "<redacted>";

impl fmt::Debug for AuthenticateRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthenticateRequest")
            .field("name", &self.name)
            .field("password", &REDACTED)
            .finish()
    }
}

impl fmt::Debug for AuthenticateResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthenticateResponse")
            .field("header", &self.header)
            .field("token", &REDACTED)
            .finish()
    }
}

impl fmt::Debug for AuthUserAddRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthUserAddRequest")
            .field("name", &self.name)
            .field("password", &REDACTED)
            .field("options", &self.options)
            .field("hashed_password", &REDACTED)
            .finish()
    }
}

impl fmt::Debug for AuthUserChangePasswordRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthUserChangePasswordRequest")
            .field("name", &self.name)
            .field("password", &REDACTED)
            .field("hashed_password", &REDACTED)
            .finish()
    }
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("password", &REDACTED)
            .field("roles", &self.roles)
            .field("options", &self.options)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_show() {
        let req = AuthenticateRequest {
            name: "root".into(),
            password: "pw-123".into(),
        };
        let resp = AuthenticateResponse {
            header: None,
            token: "tok.abc".into(),
        };
        let add = AuthUserAddRequest {
            name: "u".into(),
            password: "pw-456".into(),
            options: None,
            hashed_password: "hash-789".into(),
        };
        let shown = format!("{req:?} {resp:?} {add:?}");
        for secret in ["pw-123", "tok.abc", "pw-456", "hash-789"] {
            assert!(!shown.contains(secret), "{secret} leaked in {shown}");
        }
        assert!(shown.contains("root"));
    }
}
