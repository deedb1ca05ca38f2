//! The Auth service: enable, disable and status, authenticate, users, roles and permissions.

use std::sync::Arc;

use crate::call::{CallOptions, Deadline, Transport};
use crate::error::Result;
use crate::proto::authpb::{Permission, UserAddOptions, permission};
use crate::proto::etcdserverpb::*;

/// The permission types a role can grant on a key range.
pub use crate::proto::authpb::permission::Type as PermissionType;

/// The Auth service. Get one with [`Client::auth`](crate::Client::auth).
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::PermissionType;
/// let auth = client.auth();
/// auth.user_add("root", "rootpw").await?;
/// auth.role_add("root").await?;
/// auth.user_grant_role("root", "root").await?;
/// auth.user_add("app", "apppw").await?;
/// auth.role_add("app-rw").await?;
/// auth.role_grant_permission("app-rw", PermissionType::Readwrite, "app/", Some(etcd_ha::prefix_end(b"app/"))).await?;
/// auth.user_grant_role("app", "app-rw").await?;
/// auth.enable().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Auth {
    transport: Arc<Transport>,
    /// Per-call options (deadline, routing, require-leader) of the calls made through it.
    call: CallOptions,
}

/// One unary Auth call with the handle's deadline.
macro_rules! call {
    ($self:ident, $request:expr) => {
        $self
            .transport
            .call($self.call.call(Deadline::Default), $request)
            .await
    };
}

impl Auth {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        Auth {
            transport,
            call: CallOptions::default(),
        }
    }

    crate::call::call_option_methods!("auth");

    /// Turn authentication on (needs a `root` user with the `root` role).
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.enable().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enable(&self) -> Result<AuthEnableResponse> {
        call!(self, AuthEnableRequest {})
    }

    /// Turn authentication off (as root).
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.disable().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn disable(&self) -> Result<AuthDisableResponse> {
        call!(self, AuthDisableRequest {})
    }

    /// Whether authentication is on, and the auth store's revision (etcd 3.5+).
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// let on = auth.status().await?.enabled;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn status(&self) -> Result<AuthStatusResponse> {
        call!(self, AuthStatusRequest {})
    }

    /// Exchange a user name and password for a token. The client does this itself when it was
    /// given credentials; this is for checking credentials.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// let ok = auth.authenticate("app", "apppw").await.is_ok();
    /// # Ok(())
    /// # }
    /// ```
    pub async fn authenticate(
        &self,
        name: impl Into<String>,
        password: impl Into<String>,
    ) -> Result<AuthenticateResponse> {
        let request = AuthenticateRequest {
            name: name.into(),
            password: password.into(),
        };
        call!(self, request)
    }

    /// Add a user with a password.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.user_add("app", "apppw").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn user_add(
        &self,
        name: impl Into<String>,
        password: impl Into<String>,
    ) -> Result<AuthUserAddResponse> {
        let request = AuthUserAddRequest {
            name: name.into(),
            password: password.into(),
            options: Some(UserAddOptions { no_password: false }),
            hashed_password: String::new(),
        };
        call!(self, request)
    }

    /// Add a user that cannot log in with a password (only with a client certificate whose
    /// common name is the user name).
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.user_add_without_password("svc").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn user_add_without_password(
        &self,
        name: impl Into<String>,
    ) -> Result<AuthUserAddResponse> {
        let request = AuthUserAddRequest {
            name: name.into(),
            password: String::new(),
            options: Some(UserAddOptions { no_password: true }),
            hashed_password: String::new(),
        };
        call!(self, request)
    }

    /// A user's roles.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// let roles = auth.user_get("app").await?.roles;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn user_get(&self, name: impl Into<String>) -> Result<AuthUserGetResponse> {
        call!(self, AuthUserGetRequest { name: name.into() })
    }

    /// Every user's name.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// let users = auth.user_list().await?.users;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn user_list(&self) -> Result<AuthUserListResponse> {
        call!(self, AuthUserListRequest {})
    }

    /// Delete a user.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.user_delete("app").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn user_delete(&self, name: impl Into<String>) -> Result<AuthUserDeleteResponse> {
        call!(self, AuthUserDeleteRequest { name: name.into() })
    }

    /// Change a user's password.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.user_change_password("app", "new-pw").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn user_change_password(
        &self,
        name: impl Into<String>,
        password: impl Into<String>,
    ) -> Result<AuthUserChangePasswordResponse> {
        let request = AuthUserChangePasswordRequest {
            name: name.into(),
            password: password.into(),
            hashed_password: String::new(),
        };
        call!(self, request)
    }

    /// Grant a role to a user.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.user_grant_role("app", "app-rw").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn user_grant_role(
        &self,
        user: impl Into<String>,
        role: impl Into<String>,
    ) -> Result<AuthUserGrantRoleResponse> {
        let request = AuthUserGrantRoleRequest {
            user: user.into(),
            role: role.into(),
        };
        call!(self, request)
    }

    /// Take a role away from a user.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.user_revoke_role("app", "app-rw").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn user_revoke_role(
        &self,
        name: impl Into<String>,
        role: impl Into<String>,
    ) -> Result<AuthUserRevokeRoleResponse> {
        let request = AuthUserRevokeRoleRequest {
            name: name.into(),
            role: role.into(),
        };
        call!(self, request)
    }

    /// Add a role (with no permissions yet).
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.role_add("reader").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn role_add(&self, name: impl Into<String>) -> Result<AuthRoleAddResponse> {
        call!(self, AuthRoleAddRequest { name: name.into() })
    }

    /// A role's permissions.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// let perms = auth.role_get("reader").await?.perm;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn role_get(&self, role: impl Into<String>) -> Result<AuthRoleGetResponse> {
        call!(self, AuthRoleGetRequest { role: role.into() })
    }

    /// Every role's name.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// let roles = auth.role_list().await?.roles;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn role_list(&self) -> Result<AuthRoleListResponse> {
        call!(self, AuthRoleListRequest {})
    }

    /// Delete a role.
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.role_delete("reader").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn role_delete(&self, role: impl Into<String>) -> Result<AuthRoleDeleteResponse> {
        call!(self, AuthRoleDeleteRequest { role: role.into() })
    }

    /// Let `role` read, write or both on `key`, or on `[key, range_end)` when `range_end` is
    /// given (use [`prefix_end`](crate::prefix_end) for a prefix).
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// use etcd_ha::PermissionType;
    /// auth.role_grant_permission("reader", PermissionType::Read, "config/", Some(etcd_ha::prefix_end(b"config/"))).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn role_grant_permission(
        &self,
        role: impl Into<String>,
        perm_type: permission::Type,
        key: impl Into<Vec<u8>>,
        range_end: Option<Vec<u8>>,
    ) -> Result<AuthRoleGrantPermissionResponse> {
        let request = AuthRoleGrantPermissionRequest {
            name: role.into(),
            perm: Some(Permission {
                perm_type: perm_type as i32,
                key: key.into(),
                range_end: range_end.unwrap_or_default(),
            }),
        };
        call!(self, request)
    }

    /// Take away the permission `role` has on `key` (or `[key, range_end)`).
    ///
    /// ```no_run
    /// # async fn demo(auth: etcd_ha::Auth) -> etcd_ha::Result<()> {
    /// auth.role_revoke_permission("reader", "config/", Some(etcd_ha::prefix_end(b"config/"))).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn role_revoke_permission(
        &self,
        role: impl Into<String>,
        key: impl Into<Vec<u8>>,
        range_end: Option<Vec<u8>>,
    ) -> Result<AuthRoleRevokePermissionResponse> {
        let request = AuthRoleRevokePermissionRequest {
            role: role.into(),
            key: key.into(),
            range_end: range_end.unwrap_or_default(),
        };
        call!(self, request)
    }
}
