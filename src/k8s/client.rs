//! The API client every command builds: in-cluster configuration or
//! `KUBECONFIG`, without kube's retry layer.
//!
//! kube retries 429, 503 and 504 up to 15 times, with a backoff that grows
//! to minutes. That turns one owner lookup into a burst against an API
//! server that is already struggling, holds a worker's `release` at boot
//! long past its `--timeout`, and makes `doctor` hang where it should
//! report. Each caller retries where it means to: a lookup once within its
//! budget, the watch with its own backoff, the probe in its own loop.

/// `config` without kube's default retry layer.
pub fn without_retries(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Neither an in-cluster configuration nor a usable `KUBECONFIG`.
    #[error("no cluster (in-cluster config or KUBECONFIG): {0}")]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration was found but a client cannot be built from it.
    #[error("cannot build the API client: {0}")]
    Build(#[source] kube::Error),
}

/// A client for the cluster this process runs against, without retries.
///
/// # Errors
///
/// [`ClientError`] when there is no cluster configuration or it is unusable.
pub async fn infer() -> Result<kube::Client, ClientError> {
    let config = kube::Config::infer().await.map_err(ClientError::Infer)?;
    kube::Client::try_from(without_retries(config)).map_err(ClientError::Build)
}
