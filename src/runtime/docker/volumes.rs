//! What a node's container holds on its own engine, with no file system shared with this host:
//! the agent's files, unpacked once per engine into a volume that nodes mount read-only, and the
//! node's root, an anonymous volume made and removed with the container, whose first
//! directories its agent makes as it starts.

use std::collections::HashMap;

use anyhow::Context;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, VolumeCreateRequest};
use bollard::query_parameters::{
    ContainerArchiveInfoOptionsBuilder, CreateContainerOptionsBuilder, ListVolumesOptionsBuilder,
    UploadToContainerOptionsBuilder,
};

use super::agent_files::{AGENT_DIR, COMPLETE};
use super::{removal, status_of, DockerRuntime, NODE_ROOT};
use crate::runtime::{NodeError, NodeSpec, NODE_DIRS};

/// Marks the volumes that hold the agent's files, and the containers made to fill them. This
/// build reads it on neither (it finds its volumes by name and looks inside them), but servers
/// of earlier builds on the same engine find the volumes they clean up by it.
const LABEL_AGENT_FILES: &str = "batchpool.agent-files";

/// The start of an agent volume's name; the rest is the digest of the agent's files.
const AGENT_VOLUME_PREFIX: &str = "batchpool-agent-";

/// How long a filler container may stand before it is taken for one a stopped server left.
const FILL_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The agent's volume, mounted read-only where nodes find the agent.
pub(super) fn agent_mount(volume: &str) -> Mount {
    Mount {
        target: Some(AGENT_DIR.into()),
        source: Some(volume.into()),
        typ: Some(MountType::VOLUME),
        read_only: Some(true),
        ..Default::default()
    }
}

impl DockerRuntime {
    /// The volume on this engine that holds the agent's files: made and filled the first time
    /// a node needs it, one per build of the agent (whichever server of that build, of any
    /// installation, fills it first), and found filled after a restart.
    pub(super) async fn agent_volume(&self, spec: &NodeSpec) -> Result<String, NodeError> {
        let mut known = self.agent_volume.lock().await;
        if let Some(name) = known.as_ref() {
            return Ok(name.clone());
        }
        let name = format!("{AGENT_VOLUME_PREFIX}{}", self.agent.files.digest);
        self.fill_agent_volume(spec, &name)
            .await
            .map_err(|e| NodeError {
                code: "NodeCreationFailed",
                message: format!(
                    "putting the node agent's files on the Docker host for node {}: {e:#}",
                    spec.node_id
                ),
            })?;
        self.drop_old_agent_volumes(&name).await;
        *known = Some(name.clone());
        Ok(name)
    }

    async fn fill_agent_volume(&self, spec: &NodeSpec, volume: &str) -> anyhow::Result<()> {
        let labels = HashMap::from([(LABEL_AGENT_FILES.to_string(), String::new())]);
        let request = VolumeCreateRequest {
            name: Some(volume.into()),
            labels: Some(labels.clone()),
            ..Default::default()
        };
        // One that exists already is returned as it is.
        self.docker
            .create_volume(request)
            .await
            .context("making the volume")?;
        // A container that never starts, made to reach the volume through; the node's image
        // is on the engine already. Its name is the volume's: one filler at a time.
        let helper = format!("{volume}-fill");
        let mut mount = agent_mount(volume);
        mount.read_only = Some(false);
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            entrypoint: Some(vec![format!("{AGENT_DIR}/batchpool")]),
            labels: Some(labels),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                mounts: Some(vec![mount]),
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.take_filler(&helper, body).await?;
        let filled = self.fill_through(&helper).await;
        self.remove_helper(&helper).await;
        filled
    }

    /// Makes the filler container `helper`. While another server's filler of the same name
    /// exists (it is filling the volume), waits for it to go; one that stays past
    /// [`FILL_WAIT`] was left by a server that stopped mid-way, and is removed.
    async fn take_filler(&self, helper: &str, body: ContainerCreateBody) -> anyhow::Result<()> {
        let options = CreateContainerOptionsBuilder::default()
            .name(helper)
            .build();
        let since = std::time::Instant::now();
        loop {
            match self
                .docker
                .create_container(Some(options.clone()), body.clone())
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if status_of(&e) == Some(409) => {
                    if since.elapsed() > FILL_WAIT {
                        self.remove_helper(helper).await;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
                Err(e) => return Err(e).context("making a container to fill it through"),
            }
        }
    }

    /// Unpacks the agent's archive into the volume `helper` mounts, unless it holds all of it.
    async fn fill_through(&self, helper: &str) -> anyhow::Result<()> {
        if self
            .agent_complete_in(helper)
            .await
            .context("looking into the volume")?
        {
            return Ok(());
        }
        let bytes = self.agent.files.archive();
        let options = UploadToContainerOptionsBuilder::default()
            .path(AGENT_DIR)
            .build();
        self.docker
            .upload_to_container(helper, Some(options), bollard::body_try_stream(bytes))
            .await
            .context("unpacking the agent's files into it")
    }

    async fn remove_helper(&self, helper: &str) {
        let _ = self.docker.remove_container(helper, Some(removal())).await;
    }

    /// Whether the agent's volume, as the container `container` mounts it, holds the whole
    /// archive (its last entry, [`COMPLETE`], is there). A volume the engine made for the
    /// container, because it was not there, is empty; one a server is filling lacks the entry
    /// until it is done. One look at a created container: about 2 ms of the engine's.
    pub(super) async fn agent_complete_in(
        &self,
        container: &str,
    ) -> Result<bool, bollard::errors::Error> {
        let complete = format!("{AGENT_DIR}/{COMPLETE}");
        let look = ContainerArchiveInfoOptionsBuilder::default()
            .path(&complete)
            .build();
        match self
            .docker
            .get_container_archive_info(container, Some(look))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Forgets the agent's volume `volume`, which the next node fills again; an empty one the
    /// engine made goes, unless a container holds it (it is filled as it is then).
    pub(super) async fn forget_agent_volume(&self, volume: &str) {
        let mut known = self.agent_volume.lock().await;
        if known.as_deref() == Some(volume) {
            *known = None;
        }
        let none: Option<bollard::query_parameters::RemoveVolumeOptions> = None;
        let _ = self.docker.remove_volume(volume, none).await;
    }

    /// Volumes of other builds of the agent go once no container mounts them (the engine
    /// refuses while one does, and the next start tries again). They are known by their name:
    /// one the engine made for a node of an old build, which lost its volume to the race
    /// `create_with_agent` closes, has no label.
    async fn drop_old_agent_volumes(&self, current: &str) {
        let filters = HashMap::from([("name", vec![AGENT_VOLUME_PREFIX.to_string()])]);
        let options = ListVolumesOptionsBuilder::default()
            .filters(&filters)
            .build();
        let Ok(found) = self.docker.list_volumes(Some(options)).await else {
            return;
        };
        for volume in found.volumes.unwrap_or_default() {
            // The engine's name filter matches anywhere in the name.
            if volume.name.starts_with(AGENT_VOLUME_PREFIX) && volume.name != current {
                let none: Option<bollard::query_parameters::RemoveVolumeOptions> = None;
                let _ = self.docker.remove_volume(&volume.name, none).await;
            }
        }
    }
}

/// [`NODE_DIRS`] below the node's root, in the form of the agent's environment, for it to make
/// as it starts.
pub(super) fn node_dirs() -> String {
    format!("{NODE_ROOT}:{}", NODE_DIRS.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_makes_each_of_the_node_dirs_below_its_root() {
        assert_eq!(node_dirs(), "/mnt/batch/tasks:shared:workitems:startup/wd");
    }
}
