//! Preparation of one job (the `prepare_executor` section): the job's variables and paths,
//! the connection (with upstream's retries), the helper image, the volumes with their
//! permission fixes, and the job image, ending in the container inputs the stages use.
//! A child of `run`, which decides when it runs and what happens after.

use std::collections::HashMap;
use std::time::Duration;

use super::{JobRun, Prepared};
use crate::executor::build_settings::GitStrategy;
use crate::executor::connect::{self, Engine};
use crate::executor::containers::{build_user, ContainerInputs, JobOrSystem};
use crate::executor::error::{FailureReason, JobFailure, SystemError};
use crate::executor::image::{self, ImageError, Puller};
use crate::executor::labels::LabelFacts;
use crate::executor::networks::{DockerNetworks, NetworkManager, NetworkRequest};
use crate::executor::paths;
use crate::executor::plan;
use crate::executor::script::detect_shell_command;
use crate::executor::script::variables::VarList;
use crate::executor::services::{self, ServiceDefinition, StartedService};
use crate::executor::trace::Trace;
use crate::executor::volumes;

fn map_image_error(e: ImageError) -> JobOrSystem {
    match e {
        ImageError::Job(f) => JobOrSystem::Job(f),
        ImageError::System(s) => JobOrSystem::System(s),
    }
}

impl JobRun<'_> {
    pub(super) async fn prepare(&mut self, trace: &mut Trace<'_>) -> Result<Prepared, JobOrSystem> {
        let req = self.req;
        let payload = req.payload;
        let runner = req.runner;
        let ds = &runner.docker;
        // As upstream, unknown `executor_opts` on the image or on any service fail the job
        // before anything runs.
        let unsupported: Vec<String> = payload
            .image
            .iter()
            .map(|i| ("image", i))
            .chain(payload.services.iter().map(|s| ("service", s)))
            .flat_map(|(what, i)| {
                i.executor_opts
                    .other
                    .keys()
                    .chain(i.executor_opts.docker.other.keys())
                    .map(move |k| format!("{k} ({what} {})", i.name))
            })
            .collect();
        if !unsupported.is_empty() {
            return Err(JobFailure {
                reason: FailureReason::RunnerSystemFailure,
                exit_code: Some(3),
                message: format!(
                    "unsupported executor_opts keys for the docker executor: {}",
                    unsupported.join(", ")
                ),
            }
            .into());
        }
        if runner.docker_section_missing {
            return Err(JobFailure::new(
                FailureReason::RunnerConfigurationError,
                "missing docker configuration: add a [runners.docker] section (with at least \
                 image = \"...\") to this runner in config.toml",
            )
            .into());
        }
        // Options upstream checks (and seccomp files it reads) when it builds a host config.
        let effective = crate::executor::docker_options::resolve(ds)?;
        let plan = plan::plan_job(payload, runner, self.req.slot)?;
        for w in &plan.warnings {
            trace.warning(w);
        }
        let plan::JobPlan {
            short,
            paths,
            vars,
            settings,
            volumes: volume_specs,
            image_name,
            image_as_written,
            per_build_network,
            ..
        } = plan;
        let service_defs = services::definitions(&ds.services, &payload.services, &vars)?;
        trace.info(&format!(
            "Using Docker executor with image {image_name} ..."
        ));
        if ds.volume_keep {
            trace.warning(
                "volume_keep is enabled: Docker volumes will not be removed after job completion \
                 and may accumulate on disk",
            );
        }
        let (cache_remote, cache_warnings) = if payload
            .cache
            .iter()
            .any(|c| !c.paths.is_empty() || c.untracked)
        {
            crate::cache::CacheRemote::resolving_iam(
                runner.cache.as_ref(),
                &short,
                payload.job_info.project_id,
                Duration::from_secs(self.timeout_secs),
            )
            .await
        } else {
            (crate::cache::CacheRemote::local(), Vec::new())
        };
        for w in cache_warnings {
            trace.warning(&w);
        }

        let engine = self.connect(trace).await?;
        self.mark("connected");
        let docker = engine.docker.clone();
        let mut puller = Puller::new(image::DockerImages::new(
            docker.clone(),
            &engine.api_version,
        ));
        let auth = image::auth::AuthSources {
            docker_auth_config: vars.get("DOCKER_AUTH_CONFIG").map(|v| v.value.clone()),
            home: std::env::var_os("HOME").map(std::path::PathBuf::from),
            payload: payload.credentials.clone(),
            helpers: image::auth::Helpers::default(),
        };

        // Helper image: helper_image with the config policies, else the pinned upstream one.
        let helper_policies = |name: &str| {
            image::effective_pull_policies_for(
                name,
                &[],
                &ds.pull_policy,
                &ds.allowed_pull_policies,
            )
            .map_err(ImageError::Job)
        };
        // `${CI_RUNNER_VERSION}` in helper_image names the helper version drover's commands
        // are written for (upstream's documented mirror pattern `…:x86_64-v${CI_RUNNER_VERSION}`
        // must resolve to a helper tag that exists).
        let helper_vars = helper_image_variables(&vars);
        let default_helper =
            image::default_helper_image(&engine.architecture, ds.helper_image_flavor.as_deref());
        let configured_helper = ds
            .helper_image
            .as_deref()
            .map(|h| helper_vars.expand(h))
            .filter(|h| !h.is_empty());
        let helper = match &configured_helper {
            Some(name) => {
                trace.info(&format!(
                    "Using helper image:  {name}  (overridden, default would be  {default_helper} )"
                ));
                match helper_policies(name) {
                    Ok(policies) => puller.get(name, &policies, &auth, None, trace).await,
                    Err(e) => Err(e),
                }
            }
            // The default helper: used as it is when present, else loaded from an archive
            // installed with the runner, else pulled with the config's policies (upstream's
            // order).
            None => match puller.find_local(&default_helper).await {
                Ok(Some(found)) => Ok(found),
                Ok(None) => {
                    let info = image::helper_image_info(
                        &engine.architecture,
                        ds.helper_image_flavor.as_deref(),
                        &format!("v{}", image::PINNED_HELPER_VERSION),
                    );
                    let archives = image::prebuilt::archive_candidates(
                        &image::prebuilt::search_dirs(),
                        &info.prebuilt,
                    );
                    let outcome = image::prebuilt::load(&docker, &archives, &default_helper).await;
                    for w in &outcome.warnings {
                        trace.warning(w);
                    }
                    let loaded = match outcome.loaded {
                        true => puller.find_local(&default_helper).await,
                        false => Ok(None),
                    };
                    match loaded {
                        Ok(Some(found)) => Ok(found),
                        Ok(None) => {
                            trace.info(&format!("Using helper image:  {default_helper}"));
                            match helper_policies(&default_helper) {
                                Ok(policies) => {
                                    puller
                                        .get(&default_helper, &policies, &auth, None, trace)
                                        .await
                                }
                                Err(e) => Err(e),
                            }
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            },
        }
        .map_err(map_image_error)?;

        self.mark("helper image ready");
        // Volumes.
        let random_name = paths::random_name(&paths::project_unique_name(
            &short,
            payload.job_info.project_id,
            self.req.slot.project,
        ));
        let real_unique = paths::project_real_unique_name(
            &runner.token,
            &runner.system_id,
            payload.job_info.project_id,
            self.req.slot.project,
        );
        let protected = plan::ref_protected(payload, &vars)
            || payload
                .cache
                .iter()
                .any(|c| c.key.ends_with("-protected") && !c.key.ends_with("-non_protected"));
        let plan = volumes::plan(&volumes::PlanInputs {
            volumes: &volume_specs,
            build_dir: &paths.build_dir,
            root_dir: &paths.root_dir,
            random_name: &random_name,
            real_unique_name: &real_unique,
            disable_cache: ds.disable_cache,
            host_cache_dir: ds.cache_dir.as_deref(),
            protected,
            reusable_builds: settings.git_strategy == GitStrategy::Fetch,
        })?;
        let facts = self.label_facts(&short, &vars);
        // Services mount the volumes and start before the helper container, so with services
        // the fix must come first, in its own containers, as upstream does.
        let fix = if service_defs.is_empty() {
            volumes::PermissionFix::DeferToHelper
        } else {
            volumes::PermissionFix::Containers
        };
        let permission_fix = self
            .volumes
            .create(
                &docker,
                &plan,
                &facts,
                &volumes::VolumeDriver {
                    name: ds.volume_driver.as_deref(),
                    options: &ds.volume_driver_ops,
                },
                &helper.id,
                fix,
            )
            .await?;

        self.mark("volumes ready");
        let mut networks = NetworkManager::new(DockerNetworks::new(docker.clone()));
        let created = networks
            .create(&NetworkRequest::for_job(ds, per_build_network, &facts))
            .await;
        let network = services::JobNetwork {
            mode: networks.mode().map(str::to_string),
            per_build: networks.per_build(),
            mac_address: ds.mac_address.clone(),
            legacy_api: services::legacy_endpoint_api(&engine.api_version),
        };
        if let Some(w) = network.legacy_mac_warning() {
            trace.warning(w);
        }
        // Kept before any error, so cleanup removes a network created before it failed.
        self.network = Some(networks);
        created.map_err(SystemError::from)?;
        let mut container_labels = HashMap::new();
        for (k, v) in &ds.container_labels {
            container_labels.insert(k.clone(), vars.expand(v));
        }
        let started = self
            .start_services(
                trace,
                &mut puller,
                &service_defs,
                &ServiceJob {
                    vars: &vars,
                    auth: &auth,
                    helper_image: &helper.id,
                    random_name: &random_name,
                    labels: &facts.labels("", &[]),
                    container_labels: &container_labels,
                    binds: &plan.binds(),
                    network: &network,
                    settings: &effective,
                    debug_services: settings.debug_services && !runner.debug_trace_disabled,
                },
            )
            .await?;
        self.mark("services ready");
        // The job image.
        let image_opts = payload.image.as_ref();
        let requested: &[String] = image_opts
            .map(|i| i.pull_policy.as_slice())
            .unwrap_or_default();
        let policies = image::effective_pull_policies_for(
            &image_name,
            requested,
            &ds.pull_policy,
            &ds.allowed_pull_policies,
        )?;
        // The image's docker options are expanded with the job's variables, as upstream does.
        let platform = image_opts
            .map(|i| vars.expand(&i.executor_opts.docker.platform))
            .filter(|p| !p.is_empty());
        let build_image = puller
            .get(&image_name, &policies, &auth, platform.as_deref(), trace)
            .await
            .map_err(map_image_error)?;

        let wants_entrypoint =
            image_opts.is_some_and(|i| i.entrypoint.as_ref().is_some_and(|e| !e.is_empty()));
        if wants_entrypoint && ds.disable_entrypoint_overwrite {
            trace.warning("Entrypoint override disabled");
        }
        let image_user = image_opts
            .map(|i| vars.expand(&i.executor_opts.docker.user))
            .unwrap_or_default();
        let mut labels = facts.labels("", &[]);
        labels.retain(|k, _| !k.ends_with(".type"));
        labels.extend(container_labels);
        let inputs = ContainerInputs {
            random_name,
            hostname: ds.hostname.clone().unwrap_or_else(|| {
                paths::project_unique_name(
                    &short,
                    payload.job_info.project_id,
                    self.req.slot.project,
                )
            }),
            env: vars.env(),
            binds: plan.binds(),
            labels,
            helper_image: helper.id.clone(),
            build_image: build_image.reference.clone(),
            build_image_name: image_as_written,
            build_entrypoint: image_opts
                .and_then(|i| i.entrypoint.clone())
                .filter(|e| !e.is_empty()),
            build_user: build_user(ds, &image_user)?,
            // As upstream: with a `platform` asked for, the container is created for the
            // platform of the image that was found or pulled.
            build_platform: platform.map(|_| build_image.platform.clone()),
            build_cmd: detect_shell_command(),
            service_links: if network.needs_links() {
                services::links(&started)
            } else {
                Vec::new()
            },
            network,
            use_init: vars
                .bool("FF_USE_INIT_WITH_DOCKER_EXECUTOR")
                .unwrap_or(false),
        };
        Ok(Prepared {
            docker_settings: effective,
            engine,
            vars,
            paths,
            settings,
            inputs,
            permission_fix,
            cache_remote,
        })
    }

    /// Pulls and starts the services in order ("Starting service …"), then waits for them
    /// (the health check warns and never fails the job).
    async fn start_services(
        &mut self,
        trace: &mut Trace<'_>,
        puller: &mut Puller<image::DockerImages>,
        defs: &[ServiceDefinition],
        job: &ServiceJob<'_>,
    ) -> Result<Vec<StartedService>, JobOrSystem> {
        let ds = job.settings;
        let wait = services::wait_timeout(ds.services.wait_timeout);
        let start_inputs = services::StartInputs {
            random_name: job.random_name,
            labels: job.labels,
            container_labels: job.container_labels,
            binds: job.binds,
            network: job.network,
            settings: ds,
            wait_timeout: wait
                .unwrap_or_default()
                .max(Duration::from_secs(services::DEFAULT_WAIT_TIMEOUT)),
        };
        let mut taken = services::Aliases::default();
        let mut started = Vec::new();
        for (index, def) in defs.iter().enumerate() {
            let name = services::parse_name(&def.image);
            // A service none of whose aliases is free is not started at all, as upstream does.
            let (aliases, warnings) = taken.claim(&name, def, index);
            for w in warnings {
                trace.warning(&w);
            }
            if aliases.is_empty() {
                continue;
            }
            services::require_image(&name, def)?;
            // `service:version...`, or `service@sha256:...` for a digest, as upstream prints.
            let sep = if name.version.starts_with("@sha256") {
                ""
            } else {
                ":"
            };
            trace.info(&format!(
                "Starting service {}{sep}{}...",
                name.service, name.version
            ));
            let policies = image::effective_pull_policies_for(
                &name.image,
                &def.pull_policy,
                &ds.pull_policy,
                &ds.allowed_pull_policies,
            )?;
            let image = puller
                .get(
                    &name.image,
                    &policies,
                    job.auth,
                    def.platform.as_deref(),
                    trace,
                )
                .await
                .map_err(map_image_error)?;
            if ds.disable_entrypoint_overwrite
                && def.entrypoint.as_ref().is_some_and(|e| !e.is_empty())
            {
                trace.warning("Entrypoint override disabled");
            }
            let svc = services::ServiceToStart {
                env: services::service_env(job.vars, def),
                def: def.clone(),
                name,
                platform: def.platform.as_ref().map(|_| image.platform.clone()),
                image_ref: image.reference,
                aliases,
            };
            let s = services::start(
                &self.engine_docker()?,
                index,
                &svc,
                &start_inputs,
                &mut self.containers.created,
            )
            .await?;
            started.push(s);
        }
        if job.debug_services && !started.is_empty() {
            // Bounded: lines the job log cannot take fast enough are dropped.
            let (tx, rx) = tokio::sync::mpsc::channel(4096);
            let tasks = services::follow_logs(&self.engine_docker()?, &started, &tx);
            self.service_logs = Some(super::ServiceLogs { rx, tasks });
        }
        if let (Some(timeout), false) = (wait, started.is_empty()) {
            trace.info(&format!(
                "Waiting for services to be up and running (timeout {} seconds)...",
                timeout.as_secs()
            ));
            let blocks = services::wait_for_services(
                &self.engine_docker()?,
                &started,
                job.helper_image,
                job.labels,
                job.network,
                timeout,
            )
            .await;
            for block in blocks {
                for line in block.lines() {
                    trace.write_stream(
                        crate::executor::trace::Stream::RunnerStderr,
                        format!("\x1b[0;33m{line}\x1b[0;m\n").as_bytes(),
                    );
                }
            }
        }
        self.drain_service_logs(trace);
        Ok(started)
    }

    fn engine_docker(&self) -> Result<bollard::Docker, SystemError> {
        self.engine
            .as_ref()
            .map(|e| e.docker.clone())
            .ok_or_else(|| SystemError::Engine("not connected to the Docker Engine".into()))
    }

    fn label_facts(&self, short: &str, vars: &VarList) -> LabelFacts {
        crate::executor::labels::job_facts(
            self.req.payload,
            vars,
            short,
            &self.req.runner.system_id,
            self.req.slot,
            self.timeout_secs,
        )
    }

    /// Connects with upstream's preparation retries (3 attempts, 3 s apart).
    async fn connect(&mut self, trace: &mut Trace<'_>) -> Result<Engine, JobOrSystem> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match connect::connect(self.req.endpoint).await {
                Ok(engine) => {
                    self.engine = Some(engine.clone());
                    return Ok(engine);
                }
                Err(e) if attempt < 3 && !self.control.abort.is_cancelled() => {
                    trace.warning(&format!("Preparation failed: {e}"));
                    trace.info("Will be retried in 3s ...");
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                Err(e) => return Err(SystemError::from(e).into()),
            }
        }
    }
}

/// The job facts the services need.
struct ServiceJob<'a> {
    vars: &'a VarList,
    auth: &'a image::auth::AuthSources,
    helper_image: &'a str,
    random_name: &'a str,
    labels: &'a HashMap<String, String>,
    container_labels: &'a HashMap<String, String>,
    binds: &'a [String],
    network: &'a services::JobNetwork,
    settings: &'a crate::executor::settings::DockerSettings,
    /// `CI_DEBUG_SERVICES` (and not disabled on this runner).
    debug_services: bool,
}

/// The variables `helper_image` is expanded with: the job's, with `CI_RUNNER_VERSION` set to
/// the pinned upstream helper version.
fn helper_image_variables(vars: &VarList) -> VarList {
    let mut out = vars.clone();
    for v in out.vars.iter_mut().filter(|v| v.key == "CI_RUNNER_VERSION") {
        v.value = image::PINNED_HELPER_VERSION.to_string();
    }
    out
}
