//! `FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR`, as upstream does when it creates the build
//! container: if the job image runs as a user other than root, read that user's uid and gid in
//! the build container (`id -u`, `id -g`, the last line of each), then give the project
//! directory and its temporary directory to them (`chown -RP`) from the helper container, with
//! one `Changing ownership of files at "<dir>" to <uid>:<gid>` line each. A failed `chown` is
//! only logged, as upstream; failing to learn the ids fails the job.

use super::{JobRun, Prepared};
use crate::executor::containers::Role;
use crate::executor::error::{JobError, SystemError};
use crate::executor::stages::{run_stage, Captured, StageEnd};
use crate::executor::trace::Trace;

/// The most output read from one of these commands.
const OUTPUT_LIMIT: usize = 1024;

/// A single-quoted shell word.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

use crate::executor::image::{image_user_is_root, user_id_from_output};

impl JobRun<'_> {
    /// Runs `script` in the container of `role` and returns its exit code and output.
    async fn capture(
        &mut self,
        p: &Prepared,
        role: Role,
        script: &str,
    ) -> Result<(i64, String), JobError> {
        let docker = p.engine.docker.clone();
        let id = self
            .containers
            .get(&docker, role, &p.inputs, &p.docker_settings)
            .await
            .map_err(JobError::from)?;
        let mut out = Captured {
            limit: OUTPUT_LIMIT,
            ..Default::default()
        };
        // Bounded like any stage by cancel, abort and the job timeout.
        let stop = super::stop_signal(
            self.control.clone(),
            self.deadline,
            self.phase_deadline(),
            None,
            false,
            self.cancel_consumed,
        );
        let end = run_stage(
            &docker,
            &id,
            script,
            role == Role::Build,
            &mut out,
            None,
            stop,
        )
        .await
        .map_err(JobError::from)?;
        let code = match end {
            StageEnd::Exited(code) => code,
            StageEnd::Stopped(reason) => {
                self.containers.discard(&docker, role).await;
                return Err(self.stop_failure(reason, None).into());
            }
        };
        Ok((code, String::from_utf8_lossy(&out.bytes).into_owned()))
    }

    /// The build container user's id from `command` (`id -u` / `id -g`), read from its
    /// standard output only, as upstream does.
    async fn build_user_id(&mut self, p: &Prepared, command: &str) -> Result<u32, JobError> {
        let (code, out) = self
            .capture(p, Role::Build, &format!("{command} 2>/dev/null"))
            .await?;
        match (code, user_id_from_output(&out)) {
            (0, Ok(id)) => Ok(id),
            (_, Err(e)) => Err(SystemError::Engine(format!(
                "checking the job image's user with {command:?} in the build container: {e}"
            ))
            .into()),
            (code, Ok(_)) => Err(SystemError::Engine(format!(
                "checking the job image's user with {command:?} in the build container: exit \
                 code {code}"
            ))
            .into()),
        }
    }

    pub(super) async fn fix_ownership(
        &mut self,
        trace: &mut Trace<'_>,
        p: &Prepared,
    ) -> Result<(), JobError> {
        if !p
            .vars
            .bool("FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR")
            .unwrap_or(false)
        {
            return Ok(());
        }
        let user = p
            .engine
            .docker
            .inspect_image(&p.inputs.build_image)
            .await
            .map_err(|e| SystemError::docker(format!("inspect image {}", p.inputs.build_image), e))?
            .config
            .and_then(|c| c.user)
            .unwrap_or_default();
        if image_user_is_root(&user) {
            return Ok(());
        }
        let uid = self.build_user_id(p, "id -u").await?;
        let gid = self.build_user_id(p, "id -g").await?;
        if uid == 0 {
            return Ok(());
        }
        for dir in [p.paths.build_dir.clone(), p.paths.tmp_dir.clone()] {
            trace.info(&format!(
                "Changing ownership of files at {dir:?} to {uid}:{gid}"
            ));
            let script = format!("chown -RP -- {uid}:{gid} {}\n", quote(&dir));
            match self.capture(p, Role::Helper, &script).await {
                Ok((0, _)) => {}
                Ok((code, out)) => tracing::warn!(
                    dir = %dir,
                    code,
                    output = %out.trim(),
                    "changing the ownership of files failed"
                ),
                Err(e) => {
                    tracing::warn!(dir = %dir, error = %e, "changing the ownership of files failed")
                }
            }
        }
        Ok(())
    }
}
