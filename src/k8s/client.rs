//! The API client every command builds: in-cluster configuration or
//! `KUBECONFIG` (or the kubeconfig file and context given on the command
//! line), without kube's retry layer.
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
    /// The kubeconfig file named on the command line cannot be read.
    #[error("cannot read the kubeconfig file {}: {error}", path.display())]
    KubeconfigFile {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    /// The kubeconfig or the context named on the command line is unusable
    /// (kube's message, which already carries its cause).
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
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

/// Which cluster a command talks to: `--kubeconfig` and `--context`, as
/// kubectl reads them. Neither: in-cluster configuration, else
/// `KUBECONFIG` or `~/.kube/config` with its current context.
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub kubeconfig: Option<std::path::PathBuf>,
    pub context: Option<String>,
}

/// A client for `target`, without retries.
///
/// # Errors
///
/// [`ClientError`] when the configuration is missing or unusable: a
/// kubeconfig file that cannot be read (named), a context it lacks.
pub async fn connect(target: &Target) -> Result<kube::Client, ClientError> {
    if target.kubeconfig.is_none() && target.context.is_none() {
        return infer().await;
    }
    let options = kube::config::KubeConfigOptions {
        context: target.context.clone(),
        ..Default::default()
    };
    let unusable = |e: kube::config::KubeconfigError| ClientError::Kubeconfig(e.to_string());
    let config = match &target.kubeconfig {
        Some(path) => {
            std::fs::File::open(path).map_err(|error| ClientError::KubeconfigFile {
                path: path.clone(),
                error,
            })?;
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(unusable)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => kube::Config::from_kubeconfig(&options).await,
    }
    .map_err(unusable)?;
    kube::Client::try_from(without_retries(config)).map_err(ClientError::Build)
}
