//! [`Options::validate`]: every option checked once, at connect, with a typed error.

use super::*;

impl Options {
    /// Check the options once, at connect, with a typed error. Every duration option has an
    /// upper bound, [`MAX_TIMEOUT`] or [`MAX_INTERVAL`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let bad = etcd_ha::Options::new().with_keepalive(Duration::from_secs(1), Duration::from_secs(1));
    /// assert!(bad.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        let invalid = |option, reason| Err(Error::InvalidOptions { option, reason });
        if self.connect_timeout.is_zero() {
            return invalid("connect_timeout", "must be greater than zero");
        }
        if self.request_timeout.is_some_and(|t| t.is_zero()) {
            return invalid("request_timeout", "must be greater than zero");
        }
        if let Some(interval) = self.keepalive_interval {
            if interval < Duration::from_secs(5) {
                return invalid(
                    "keepalive",
                    "interval must be at least 5 s: etcd closes connections that ping more \
                     often (GOAWAY too_many_pings)",
                );
            }
            if self.keepalive_timeout.is_zero() {
                return invalid("keepalive", "timeout must be greater than zero");
            }
        }
        if self.probe_interval.is_zero() || self.probe_timeout.is_zero() {
            return invalid("probe", "interval and timeout must be greater than zero");
        }
        if self.attempt_timeout.is_zero() {
            return invalid("attempt_timeout", "must be greater than zero");
        }
        if !(0.0..=1.0).contains(&self.retry.jitter) {
            return invalid("retry", "jitter must be a fraction from 0 to 1");
        }
        if self.retry.max_attempts == 0 {
            return invalid("retry", "max_attempts must be at least 1");
        }
        if self.member_sync_interval.is_some_and(|i| i.is_zero()) {
            return invalid("member_sync", "interval must be greater than zero");
        }
        if self.health.eject_base.is_zero() || self.health.eject_max < self.health.eject_base {
            return invalid("ejection", "base must be > 0 and max >= base");
        }
        if self.health.readmit_probes == 0 {
            return invalid("ejection", "readmit_probes must be at least 1");
        }
        let (streams, per_stream) = self.keep_alive_streams;
        if !(1..=MAX_KEEP_ALIVE_STREAMS).contains(&streams) || per_stream == 0 {
            return invalid(
                "keep_alive_streams",
                "streams must be from 1 to 64 and renewals per stream at least 1",
            );
        }
        if !(1..=MAX_WATCH_STREAMS).contains(&self.watch_streams) {
            return invalid("watch_streams", "must be from 1 to 16");
        }
        if self.max_request_bytes == 0 {
            return invalid("max_request_bytes", "must be greater than zero");
        }
        if self.max_response_bytes == 0 {
            return invalid("max_response_bytes", "must be greater than zero");
        }
        if let Some(c) = &self.credentials
            && c.user.is_empty()
        {
            return invalid("user", "user name must not be empty");
        }
        bounds::check(self)?;
        if self.tls.is_some() && !cfg!(feature = "tls") {
            return Err(Error::TlsNotCompiled);
        }
        if let Some(tls) = &self.tls
            && tls.client_cert.is_some() != tls.client_key.is_some()
        {
            return invalid(
                "tls",
                "a client certificate and its key must be given together",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Options::default().validate().unwrap();
    }

    #[test]
    fn rejects_bad_values() {
        let too_fast =
            Options::new().with_keepalive(Duration::from_secs(1), Duration::from_secs(1));
        assert!(matches!(
            too_fast.validate(),
            Err(Error::InvalidOptions {
                option: "keepalive",
                ..
            })
        ));
        let zero = Options::new().with_connect_timeout(Duration::ZERO);
        assert!(zero.validate().is_err());
        let half_mtls = Options::new().with_tls(TlsOptions {
            client_cert: Some("c.pem".into()),
            ..TlsOptions::default()
        });
        assert!(half_mtls.validate().is_err());
    }
}
