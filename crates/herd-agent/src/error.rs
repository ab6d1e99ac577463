//! [`AgentError`]: what stops an agent before supervision can say anything better.

use std::path::PathBuf;

use herd_rendezvous::RendezvousError;

/// Errors that stop an agent before supervision can say anything better.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Finding the other nodes failed.
    #[error("rendezvous failed: {0}")]
    Rendezvous(#[from] RendezvousError),
    /// A follower announced a node rank that does not fit.
    #[error("{0}")]
    Layout(String),
    /// The log folder cannot be created.
    #[error("cannot create log folder {path}: {source}")]
    Logs {
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
