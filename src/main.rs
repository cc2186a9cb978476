use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Parser;
use tracing::{error, info};

use ownerguard::commands::audit::{self, AuditOptions};
use ownerguard::commands::certs::{self, CA_CERT, TLS_CERT, TLS_KEY};
use ownerguard::commands::cli::{CertsArgs, Cli, Command, DoctorArgs, ReleaseArgs, ServeArgs};
use ownerguard::commands::doctor::DoctorOptions;
use ownerguard::commands::reaper::{self, DEFAULT_LEASE_DURATION, LeaseSettings, ReaperSettings};
use ownerguard::commands::release::{Owner, ReleaseError};
use ownerguard::commands::restarts::{self, RestartSettings};
use ownerguard::commands::review;
use ownerguard::observe::Metrics;
use ownerguard::observe::Recorder;
use ownerguard::observe::UnlabelledCreates;
use ownerguard::observe::events::{Events, WarnedCreates};
use ownerguard::observe::telemetry;
use ownerguard::observe::traces::{self, TraceSettings, Traces};
use ownerguard::owner::Inventory;
use ownerguard::owner::{ClusterLookup, LookupLimits};
use ownerguard::owner::{LookupBudget, OwnerLookup};
use ownerguard::owner::{WatchSettings, Watches};
use ownerguard::serve::{ServeOptions, Server, shutdown_signal};
use ownerguard::webhook::Webhook;

fn main() -> ExitCode {
    // One process-wide crypto provider for rustls, the server's and kube's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ownerguard: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // `serve --tracing`: its exporter sends on the runtime.
    let traces = match &cli.command {
        Command::Serve(args) if args.tracing && !traces::disabled_by_env() => {
            let started = TraceSettings::from_env().and_then(|settings| {
                Traces::start(
                    runtime.handle().clone(),
                    TraceSettings {
                        ignore_parent: args.tracing_ignore_parent,
                        max_per_second: args.tracing_max_per_second,
                        ..settings
                    },
                )
            });
            match started {
                Ok(traces) => Some(Arc::new(traces)),
                Err(e) => {
                    eprintln!("ownerguard: --tracing: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    // Held to the end of main: dropped after the runtime, it writes out
    // the lines still queued.
    let _log = telemetry::init_with_traces(
        cli.log_format,
        default_level,
        traces.as_ref().map(|traces| traces.tracer()),
    );
    let code = match cli.command {
        Command::Review(args) => runtime.block_on(review::run(args)),
        Command::Serve(args) => {
            if args.tracing && traces.is_none() {
                info!("--tracing is off: OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none says so");
            }
            let served = runtime.block_on(serve(args, traces.clone()));
            // What is queued is exported while the runtime still runs,
            // within the chart's grace period after the drain.
            if let Some(traces) = &traces {
                traces.shutdown(std::time::Duration::from_secs(2));
            }
            match served {
                Ok(()) => ExitCode::SUCCESS,
                // The server's output is its log: the error is one line of it.
                Err(e) => {
                    error!("{}", once(&e));
                    ExitCode::FAILURE
                }
            }
        }
        Command::Certs(args) => report(write_certs(&args)),
        Command::Release(args) => report(runtime.block_on(release(args))),
        Command::Doctor(args) => runtime.block_on(doctor(args)),
        Command::Audit(args) => runtime.block_on(ownerguard::commands::audit::run(args)),
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "ownerguard", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
    };
    // The exporter and the runtime go before the log's writer: what their
    // last tasks log is still written. A task the runtime cannot stop (a
    // blocking name lookup of an unreachable collector) is not waited for
    // past a second.
    drop(traces);
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

/// A command's outcome for a person or a script: the error once, on
/// standard error (the log, which goes there too, does not repeat it).
fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ownerguard: {}", once(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes in one line, each said once: many errors
/// already carry their cause's text in their own message.
fn once(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain().map(ToString::to_string) {
        if !line.contains(&cause) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&cause);
        }
    }
    line
}

async fn release(args: ReleaseArgs) -> anyhow::Result<()> {
    let owner = Owner {
        namespace: args.namespace,
        name: args.owner_pod,
        uid: args.owner_uid,
    };
    // Refused before any request, the client included; named by its flag.
    if let Err(ReleaseError::InvalidOwner { what }) = owner.validate() {
        let flag = match what {
            "namespace" => "--namespace",
            "name" => "--owner-pod",
            _ => "--owner-uid",
        };
        bail!("{flag} is empty: release needs the owner pod's namespace, name and uid");
    }
    let client = ownerguard::k8s::client::connect(&args.cluster.target()).await?;
    let released = ownerguard::commands::release::release(client, &owner, args.timeout).await?;
    println!(
        "released {} pod(s), {} Job(s) and {} ConfigMap(s) of pod '{}' in namespace '{}'",
        released.pods, released.jobs, released.config_maps, owner.name, owner.namespace
    );
    Ok(())
}

async fn doctor(args: DoctorArgs) -> ExitCode {
    ownerguard::commands::doctor::run(&DoctorOptions::from(args)).await
}

fn write_certs(args: &CertsArgs) -> anyhow::Result<()> {
    let generated = certs::generate(&args.dns, &args.ip, args.days)?;
    generated.write(&args.out)?;
    eprintln!(
        "wrote {CA_CERT}, {TLS_CERT} and {TLS_KEY} to {}; caBundle:",
        args.out.display()
    );
    println!("{}", generated.ca_bundle());
    Ok(())
}

/// `--dev`: the certificates in `dir`, made for localhost when missing.
fn dev_certificates(dir: &Path) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf)> {
    let (cert, key) = (dir.join(TLS_CERT), dir.join(TLS_KEY));
    if !(cert.exists() && key.exists() && dir.join(CA_CERT).exists()) {
        let ips = ["127.0.0.1".parse()?, "::1".parse()?];
        certs::generate(&["localhost".to_string()], &ips, 365)?.write(dir)?;
        info!(dir = %dir.display(), "made a development CA and certificate for localhost");
    }
    Ok((cert, key))
}

async fn serve(args: ServeArgs, traces: Option<Arc<Traces>>) -> anyhow::Result<()> {
    let (tls_cert, tls_key) = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        _ if args.dev => dev_certificates(&args.dev_certs_dir)?,
        _ => bail!("--tls-cert and --tls-key are required (or --dev for a localhost certificate)"),
    };
    let metrics = Arc::new(Metrics::default());
    let mut events = None;
    // What /observe counts: workloads resolved in the cluster, or, with no
    // cluster to ask, counted as unresolved.
    let mut unlabelled = UnlabelledCreates::unresolved(metrics.clone());
    let lookup: Arc<dyn OwnerLookup> = match &args.pods {
        Some(path) => {
            let inventory = Inventory::from_file(path)?;
            info!(pods = inventory.len(), file = %path.display(), "owner lookup from a static inventory");
            Arc::new(inventory)
        }
        None => {
            let client = ownerguard::k8s::client::connect(&args.cluster.target())
                .await
                .context("no cluster to look owners up in; pass --pods FILE to run without one")?;
            let settings = WatchSettings {
                namespaces: args.namespaces.clone(),
                selector: args.owner_selector.clone(),
                silence_limit: args.watch_silence_limit,
                max_age: args.cache_max_age,
            };
            info!(namespaces = ?settings.namespaces, selector = ?settings.selector,
                "owner lookup from the cluster: pod watch, then live GET");
            let watches = Arc::new(Watches::spawn(client.clone(), &settings, metrics.clone()));
            if args.events {
                events = Some(Events::start(
                    client.clone(),
                    "ownerguard",
                    Some(args.reaper_identity.clone()),
                    metrics.clone(),
                ));
                info!("recording Events on the worker pods concerned (rate-limited per pod)");
            }
            unlabelled = UnlabelledCreates::start(client.clone(), metrics.clone());
            background(
                &args,
                &client,
                &watches,
                &metrics,
                events.clone(),
                &unlabelled,
            );
            let limits = LookupLimits {
                concurrency: args.lookup_concurrency,
                rate_per_second: args.lookup_rate,
            };
            Arc::new(ClusterLookup::new(client, watches, limits, metrics.clone()))
        }
    };
    let mut webhook = Webhook::new(args.policy.policy(), lookup, metrics)
        .with_lookup_budget(LookupBudget::new(args.lookup_timeout))
        .with_unlabelled(unlabelled);
    if let Some(dir) = &args.record {
        let recorder =
            Recorder::new(dir).with_context(|| format!("cannot record into {}", dir.display()))?;
        info!(dir = %dir.display(), "recording every review as a test case");
        webhook = webhook.with_observer(Arc::new(recorder));
    }
    if let Some(events) = events {
        webhook = webhook.with_observer(Arc::new(WarnedCreates { events }));
    }
    if let Some(traces) = traces {
        info!(endpoint = %traces.endpoint, sampler = %traces.sampler, service = %traces.service_name,
            "tracing: the reviews the API server traces get spans, exported over OTLP/HTTP");
        webhook = webhook.with_traces(traces);
    }
    let options = ServeOptions {
        addr: args.addr,
        metrics_addr: args.metrics_addr,
        tls_cert,
        tls_key,
        client_ca: args.client_ca.clone(),
        client_names: args.client_names.clone(),
        tls_reload_interval: args.tls_reload_interval,
        shutdown_delay: args.shutdown_delay,
        shutdown_timeout: args.shutdown_timeout,
        idle_timeout: args.idle_timeout,
        max_connections: args.max_connections,
        max_connections_per_source: args.max_connections_per_source.unwrap_or_else(|| {
            ownerguard::serve::connections::Connections::default_per_source(args.max_connections)
        }),
    };
    let server = Server::bind(options, Arc::new(webhook)).await?;
    server.run(shutdown_signal()).await
}

/// What `serve` runs beside the webhook in a cluster: the periodic audit
/// and the reaper, when asked for.
fn background(
    args: &ServeArgs,
    client: &kube::Client,
    watches: &Arc<Watches>,
    metrics: &Arc<Metrics>,
    events: Option<Events>,
    unlabelled: &UnlabelledCreates,
) {
    if !args.audit_interval.is_zero() {
        let options = AuditOptions {
            namespaces: args.namespaces.clone(),
            resources: args.audit_resources.clone(),
            fix: false,
            policy: args.policy.policy(),
            reports: args.audit_reports,
            events: None,
            unlabelled: Some(unlabelled.clone()),
        };
        info!(interval = ?args.audit_interval, resources = ?options.resources, "periodic audit");
        // One replica writes the reports: a holder renews at each pass, so
        // the Lease outlives a pass and the gap to the next one.
        let writer = args.audit_reports.then(|| LeaseSettings {
            namespace: args.reaper_lease_namespace.clone(),
            name: args.audit_lease.clone(),
            identity: args.reaper_identity.clone(),
            duration: audit::report_lease_duration(args.audit_interval),
        });
        tokio::spawn(audit::periodically(
            client.clone(),
            options,
            args.audit_interval,
            writer,
            metrics.clone(),
        ));
    }
    if args.release_restarted {
        let settings = RestartSettings {
            key_prefix: args.policy.key_prefix.clone(),
            clock_margin: args.restart_clock_margin,
            namespaces: args.namespaces.clone(),
            lease: LeaseSettings {
                namespace: args.reaper_lease_namespace.clone(),
                name: args.restart_lease.clone(),
                identity: args.reaper_identity.clone(),
                duration: DEFAULT_LEASE_DURATION,
            },
            retry_after: reaper::DEFAULT_REAP_RETRY,
        };
        info!(label = %settings.label(), margin = ?settings.clock_margin, lease = %settings.lease.name,
            "releasing what earlier runs of restarted workers made (pods that opt in)");
        tokio::spawn(restarts::run(
            client.clone(),
            settings,
            metrics.clone(),
            events.clone(),
        ));
    }
    if args.reap_finished {
        let settings = ReaperSettings {
            after: args.reap_after,
            lease: LeaseSettings {
                namespace: args.reaper_lease_namespace.clone(),
                name: args.reaper_lease.clone(),
                identity: args.reaper_identity.clone(),
                duration: DEFAULT_LEASE_DURATION,
            },
            retry_after: reaper::DEFAULT_REAP_RETRY,
        };
        info!(after = ?settings.after, lease = %settings.lease.name, identity = %settings.lease.identity,
            "reaping what finished owner pods own");
        tokio::spawn(reaper::run(
            client.clone(),
            watches.finished.clone(),
            settings,
            metrics.clone(),
            events,
        ));
    }
}
