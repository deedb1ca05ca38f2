//! Software transactional memory: run a read-modify-write closure against etcd as one transaction, again on conflict.
//!
//! # How
//!
//! [`Stm::run`] calls the closure with a [`StmTxn`]. Its reads go to etcd (once per key: a key
//! read twice, or written before, answers from the attempt itself); its writes are buffered.
//! When the closure returns, the writes go out in one txn whose compares check that every key
//! read is still as it was read (see [`Isolation`] for what each level checks). If a compare
//! fails, another writer got in between: nothing was written, and the closure runs again, from
//! the values the failed txn read back in the same round trip. After
//! [`with_max_attempts`](Stm::with_max_attempts) conflicts in a row, the run ends with
//! [`Error::StmConflict`].
//!
//! Design reference: etcd's Go client, `concurrency.NewSTM` (same isolation levels, the same
//! compares and the same prefetch on conflict).
//!
//! # Side effects and errors
//!
//! The closure may run more than once: keep side effects other than its reads and writes out
//! of it (or make them idempotent). An error of the closure ends the run at once with that
//! error, nothing written. An error of the commit is returned as it is: when it
//! [may have applied](crate::Error::may_have_applied) (a timeout, a lost connection), the
//! writes may or may not be in etcd, and running the same transaction again blindly could
//! apply it twice. Make the transaction able to tell: write a marker key in it and read that
//! key first, so that a second run that finds the marker does nothing (see the example on
//! [`Stm::run`]).

mod state;

use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdGuard};

pub use state::Isolation;
use state::State;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::kv::Kv;

/// How many times [`Stm::run`] runs a transaction that keeps conflicting, by default.
///
/// ```
/// assert_eq!(etcd_ha::concurrency::stm::DEFAULT_MAX_ATTEMPTS, 32);
/// ```
pub const DEFAULT_MAX_ATTEMPTS: u32 = 32;

/// Runs STM transactions on a client (namespaced clients included). Cheap to clone.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::concurrency::stm::{Isolation, Stm};
///
/// let stm = Stm::new(&client).with_isolation(Isolation::RepeatableRead);
/// let hits = stm
///     .run(|tx| async move {
///         let n: u64 = match tx.get("hits").await? {
///             Some(v) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
///             None => 0,
///         };
///         tx.put("hits", (n + 1).to_string());
///         Ok::<_, etcd_ha::Error>(n + 1)
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Stm {
    /// Reads and the commit go through it (with its namespace, deadline and routing).
    kv: Kv,
    /// What the commit checks (and at which revision reads are made).
    isolation: Isolation,
    /// Attempts before giving up with [`Error::StmConflict`].
    max_attempts: u32,
}

impl Stm {
    /// Transactions on `client`, with [`Isolation::SerializableSnapshot`] and at most
    /// [`DEFAULT_MAX_ATTEMPTS`] attempts.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// let stm = etcd_ha::concurrency::stm::Stm::new(&client);
    /// # }
    /// ```
    pub fn new(client: &Client) -> Stm {
        Stm {
            kv: client.kv(),
            isolation: Isolation::default(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// The same, with this isolation level.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// use etcd_ha::concurrency::stm::{Isolation, Stm};
    /// let stm = Stm::new(&client).with_isolation(Isolation::Serializable);
    /// # }
    /// ```
    pub fn with_isolation(mut self, isolation: Isolation) -> Stm {
        self.isolation = isolation;
        self
    }

    /// The same, giving up after `attempts` conflicts in a row (at least 1; 0 makes
    /// [`run`](Self::run) fail with [`Error::InvalidOptions`]).
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// let stm = etcd_ha::concurrency::stm::Stm::new(&client).with_max_attempts(5);
    /// # }
    /// ```
    pub fn with_max_attempts(mut self, attempts: u32) -> Stm {
        self.max_attempts = attempts;
        self
    }

    /// The same, with the reads and commits made through `kv` (for per-call options such as
    /// [`Kv::with_timeout`]).
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// use std::time::Duration;
    /// let stm = etcd_ha::concurrency::stm::Stm::new(&client)
    ///     .with_kv(client.kv().with_timeout(Duration::from_secs(1)));
    /// # }
    /// ```
    pub fn with_kv(mut self, kv: Kv) -> Stm {
        self.kv = kv;
        self
    }

    /// Run `apply` as one transaction: again, from fresh reads, each time its commit finds
    /// that a key it read changed in between; returns what the successful run returned. See
    /// the module docs for errors and for closures that must not apply twice.
    ///
    /// `apply` is called once per attempt and returns a future that owns what it uses (write
    /// `|tx| { let x = x.clone(); async move { .. } }` for captured values), so that the run
    /// can be spawned on a multi-threaded runtime.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// use etcd_ha::concurrency::stm::Stm;
    ///
    /// /// Move 10 from `a` to `b` once, even if this is called again after an ambiguous
    /// /// error (the marker key says it was done).
    /// async fn transfer(stm: &Stm, id: &str) -> etcd_ha::Result<bool> {
    ///     let marker = format!("done/{id}");
    ///     stm.run(|tx| {
    ///         let marker = marker.clone();
    ///         async move {
    ///         if tx.get(marker.as_str()).await?.is_some() {
    ///             return Ok(false); // applied by an earlier call
    ///         }
    ///         let balance = |v: Option<Vec<u8>>| -> i64 {
    ///             v.and_then(|v| String::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
    ///         };
    ///         let (a, b) = (balance(tx.get("a").await?), balance(tx.get("b").await?));
    ///         tx.put("a", (a - 10).to_string());
    ///         tx.put("b", (b + 10).to_string());
    ///         tx.put(marker.as_str(), "");
    ///         Ok(true)
    ///         }
    ///     })
    ///     .await
    /// }
    /// let stm = Stm::new(&client);
    /// loop {
    ///     match transfer(&stm, "t-1").await {
    ///         Ok(_) => break,
    ///         Err(e) if e.may_have_applied() || e.is_retryable() => continue,
    ///         Err(e) => return Err(e),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<T, E, F, Fut>(&self, mut apply: F) -> std::result::Result<T, E>
    where
        F: FnMut(StmTxn) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        if self.max_attempts == 0 {
            return Err(Error::InvalidOptions {
                option: "max_attempts",
                reason: "an STM transaction needs at least one attempt",
            }
            .into());
        }
        let mut state = State::new(self.isolation);
        for attempt in 1..=self.max_attempts {
            let tx = StmTxn {
                kv: self.kv.clone(),
                state: Arc::new(StdMutex::new(state)),
            };
            let result = apply(tx.clone()).await;
            let done = std::mem::replace(&mut *tx.lock(), State::new(self.isolation));
            let value = match result {
                Ok(value) => value,
                // A snapshot read lost to compaction: a conflict, not the closure's error.
                Err(_) if done.compacted => {
                    state = State::new(self.isolation);
                    continue;
                }
                Err(err) => return Err(err),
            };
            let resp = self.kv.txn(done.commit()).await?;
            if resp.succeeded {
                return Ok(value);
            }
            tracing::debug!(attempt, "STM transaction conflicted; running it again");
            state = done.after_conflict(&resp);
        }
        Err(Error::StmConflict {
            attempts: self.max_attempts,
        }
        .into())
    }
}

/// One attempt of an STM transaction, as its closure sees it: reads from etcd (each key once),
/// buffered writes. Cheap to clone (clones share the attempt); do not keep it past the closure.
///
/// ```no_run
/// # async fn demo(stm: etcd_ha::concurrency::stm::Stm) -> etcd_ha::Result<()> {
/// stm.run(|tx| async move {
///     let rev = tx.rev("config").await?;
///     if tx.get("config").await?.is_none() {
///         tx.put("config", "default");
///     }
///     tx.delete("config.tmp");
///     Ok::<_, etcd_ha::Error>(rev)
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct StmTxn {
    /// The runner's handle: reads go through it.
    kv: Kv,
    /// The attempt's reads and writes; a std mutex held for map updates, never across `.await`.
    state: Arc<StdMutex<State>>,
}

impl std::fmt::Debug for StmTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StmTxn")
            .field("state", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl StmTxn {
    fn lock(&self) -> StdGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `key` (`None` if absent): this attempt's own write if it made one, else
    /// what etcd holds (as the isolation level defines it), read once per attempt.
    ///
    /// ```no_run
    /// # async fn demo(tx: etcd_ha::concurrency::stm::StmTxn) -> etcd_ha::Result<()> {
    /// let value = tx.get("k").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<Option<Vec<u8>>> {
        let key = key.into();
        if let Some(value) = self.lock().cached(&key) {
            return Ok(value);
        }
        Ok(self.read(key).await?.value)
    }

    /// The mod revision of `key` as this attempt read it (0 if absent); reads it if it was not
    /// read yet. The attempt's own writes do not change it.
    ///
    /// ```no_run
    /// # async fn demo(tx: etcd_ha::concurrency::stm::StmTxn) -> etcd_ha::Result<()> {
    /// let modified_at = tx.rev("k").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn rev(&self, key: impl Into<Vec<u8>>) -> Result<i64> {
        let key = key.into();
        if let Some(revision) = self.lock().cached_revision(&key) {
            return Ok(revision);
        }
        Ok(self.read(key).await?.mod_revision)
    }

    /// Write `value` at `key` when the transaction commits.
    ///
    /// ```no_run
    /// # fn demo(tx: etcd_ha::concurrency::stm::StmTxn) {
    /// tx.put("k", "v");
    /// # }
    /// ```
    pub fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.lock().put(key.into(), value.into());
    }

    /// Delete `key` when the transaction commits.
    ///
    /// ```no_run
    /// # fn demo(tx: etcd_ha::concurrency::stm::StmTxn) {
    /// tx.delete("k");
    /// # }
    /// ```
    pub fn delete(&self, key: impl Into<Vec<u8>>) {
        self.lock().delete(key.into());
    }

    async fn read(&self, key: Vec<u8>) -> Result<state::Read> {
        let options = self.lock().read_options();
        match self.kv.get(key.clone(), options).await {
            Ok(resp) => Ok(self.lock().record(key, &resp)),
            Err(err @ Error::Compacted { .. }) => {
                self.lock().compacted = true;
                Err(err)
            }
            Err(err) => Err(err),
        }
    }
}
