//! The image a task's container runs: on the engine already, or pulled with the credentials
//! of the pool's container registries.

use bollard::auth::DockerCredentials;
use bollard::models::ImageInspect;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;

use super::{status_of, DockerRuntime};
use crate::domain::container::ContainerRegistry;

/// Why an image could not be made ready.
#[derive(Debug)]
pub(super) enum ImageError {
    /// The engine (or the registry through it) refused: (code, message) in Azure's terms.
    Refused(&'static str, String),
    /// The engine did not answer: the attempt is lost, not the task's doing.
    Unanswered(bollard::errors::Error),
}

impl DockerRuntime {
    /// The image, pulled with the registries' credentials when the engine lacks it; its
    /// configuration.
    pub(super) async fn ready_image(
        &self,
        image: &str,
        registries: &[ContainerRegistry],
    ) -> Result<ImageInspect, ImageError> {
        match self.docker.inspect_image(image).await {
            Ok(found) => return Ok(found),
            Err(e) if status_of(&e) == Some(404) => {}
            Err(e) if status_of(&e).is_none() => return Err(ImageError::Unanswered(e)),
            Err(e) => {
                return Err(ImageError::Refused(
                    "ContainerImageNotFound",
                    format!("inspecting the image {image:?}: {e}"),
                ))
            }
        }
        let Some(registry) = registry_for(image, registries) else {
            return Err(ImageError::Refused(
                "ContainerImageNotFound",
                format!("the image {image:?} is not on the Docker engine and no registry is given to pull it from; load it on the engine (docker load or docker build), or name a registry with credentials"),
            ));
        };
        let credentials = DockerCredentials {
            username: registry.user_name.clone(),
            password: registry.password.clone(),
            serveraddress: registry.registry_server.clone(),
            ..Default::default()
        };
        let options = CreateImageOptionsBuilder::default()
            .from_image(image)
            .build();
        let mut pull = self
            .docker
            .create_image(Some(options), None, Some(credentials));
        while let Some(step) = pull.next().await {
            let failed = match step {
                Ok(info) => info.error_detail.and_then(|d| d.message),
                Err(e) if status_of(&e).is_none() => return Err(ImageError::Unanswered(e)),
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = failed {
                return Err(ImageError::Refused(
                    "ContainerImagePullFailed",
                    format!(
                        "pulling {image:?} from {:?}: {why}",
                        registry.registry_server.as_deref().unwrap_or("Docker Hub")
                    ),
                ));
            }
        }
        self.docker.inspect_image(image).await.map_err(|e| {
            ImageError::Refused(
                "ContainerImagePullFailed",
                format!("the pulled image {image:?} is not there: {e}"),
            )
        })
    }
}

/// The registry an image comes from: the one whose server starts its name, else the only one.
fn registry_for<'a>(
    image: &str,
    registries: &'a [ContainerRegistry],
) -> Option<&'a ContainerRegistry> {
    registries
        .iter()
        .find(|r| {
            r.registry_server
                .as_deref()
                .is_some_and(|s| image.starts_with(&format!("{}/", s.trim_end_matches('/'))))
        })
        .or(match registries {
            [only] => Some(only),
            _ => None,
        })
}
