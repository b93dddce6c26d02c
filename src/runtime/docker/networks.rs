//! An account's bridge network on an engine: one per account, made with its first node there,
//! found by its labels and named by its id, removed with its last node (or swept once empty).

use std::collections::{HashMap, HashSet};

use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::{ListContainersOptionsBuilder, ListNetworksOptionsBuilder};

use super::{network_name, status_of, DockerRuntime};
use crate::runtime::{NodeError, NodeSpec, LABEL_ACCOUNT, LABEL_SERVER};

impl DockerRuntime {
    /// The account's network (its id), made if need be, kept by this server while the node is
    /// made on it (until the guard goes: its container has started, or it failed).
    pub(super) async fn account_network(
        &self,
        spec: &NodeSpec,
    ) -> Result<(String, MakingOn<'_>), NodeError> {
        let _one_at_a_time = self.networks.lock().await;
        let id = self
            .ensure_network(&spec.server_id, &spec.account)
            .await
            .map_err(|e| super::node::failed(spec, "creating the account's network", e))?;
        let name = network_name(&spec.server_id, &spec.account);
        *self
            .making_on
            .lock()
            .expect("lock")
            .entry(name.clone())
            .or_default() += 1;
        let guard = MakingOn {
            making_on: &self.making_on,
            network: name,
        };
        Ok((id, guard))
    }

    /// Whether a node is being made on the account's network, `name` as `network_name` gives
    /// it (then it stays). Call it holding `networks`.
    fn making_on(&self, name: &str) -> bool {
        self.making_on.lock().expect("lock").contains_key(name)
    }

    /// The account's network on this engine, made unless there is one; returns its id. Call it
    /// holding `networks`. Engines before API 1.44 make a second network of a name when two
    /// servers ask at once (CheckDuplicate or not), and then start no container on either
    /// ("ambiguous"): so each network gets a name of its own, networks are found by their
    /// labels, and every server keeps the oldest of the account's (the others go once no
    /// container holds them).
    async fn ensure_network(
        &self,
        server_id: &str,
        account: &str,
    ) -> Result<String, bollard::errors::Error> {
        if let Some(id) = self.oldest_network(server_id, account).await? {
            return Ok(id);
        }
        let unique = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let request = NetworkCreateRequest {
            name: format!("{}-{unique}", network_name(server_id, account)),
            driver: Some("bridge".into()),
            labels: Some(HashMap::from([
                (LABEL_SERVER.to_string(), server_id.to_string()),
                (LABEL_ACCOUNT.to_string(), account.to_string()),
            ])),
            ..Default::default()
        };
        self.docker.create_network(request).await?;
        // Another server's, made at the same moment, may be older than this one.
        let oldest = self.oldest_network(server_id, account).await?;
        oldest.ok_or_else(|| bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            message: "the account's network went as soon as it was made".into(),
        })
    }

    /// The oldest of the account's networks on this engine, by their labels; the others are
    /// removed where no container holds them (the engine refuses the rest).
    async fn oldest_network(
        &self,
        server_id: &str,
        account: &str,
    ) -> Result<Option<String>, bollard::errors::Error> {
        let mut networks = self.account_networks(server_id, account).await?.into_iter();
        let oldest = networks.next().map(|(id, _)| id);
        let extras: Vec<_> = networks.collect();
        if !extras.is_empty() {
            self.remove_unheld(server_id, &extras).await;
        }
        Ok(oldest)
    }

    /// The account's networks on this engine (id, name), oldest first (then by id, so every
    /// server orders them alike).
    async fn account_networks(
        &self,
        server_id: &str,
        account: &str,
    ) -> Result<Vec<(String, String)>, bollard::errors::Error> {
        let labels = vec![
            format!("{LABEL_SERVER}={server_id}"),
            format!("{LABEL_ACCOUNT}={account}"),
        ];
        let options = ListNetworksOptionsBuilder::default()
            .filters(&HashMap::from([("label", labels)]))
            .build();
        let mut found: Vec<_> = self
            .docker
            .list_networks(Some(options))
            .await?
            .into_iter()
            .filter(|n| {
                let label = |key| {
                    n.labels
                        .as_ref()
                        .and_then(|l| l.get(key))
                        .map(String::as_str)
                };
                label(LABEL_SERVER) == Some(server_id) && label(LABEL_ACCOUNT) == Some(account)
            })
            .filter_map(|n| {
                let created = n.created.as_deref().and_then(|c| {
                    chrono::DateTime::parse_from_rfc3339(c)
                        .ok()
                        .map(|t| t.with_timezone(&chrono::Utc))
                });
                // A network whose time cannot be read sorts last.
                Some((
                    created.is_none(),
                    created,
                    n.id?,
                    n.name.unwrap_or_default(),
                ))
            })
            .collect();
        found.sort();
        Ok(found
            .into_iter()
            .map(|(_, _, id, name)| (id, name))
            .collect())
    }

    /// The account's networks go with its last node on this engine; while other nodes use
    /// one, the engine refuses (403), which is as it should be. One being made on it holds it
    /// only once its container starts: until then, it stays for that node.
    pub(super) async fn after_last_node(&self, server_id: &str, account: &str) {
        let _one_at_a_time = self.networks.lock().await;
        if self.making_on(&network_name(server_id, account)) {
            return;
        }
        if let Ok(networks) = self.account_networks(server_id, account).await {
            self.remove_unheld(server_id, &networks).await;
        }
    }

    /// Removes the installation's account networks that no container holds and no node is
    /// being made on: those whose last node's removal could not take them (the engine was
    /// busy, or the container had gone already), and twins another server made.
    pub(super) async fn sweep_networks(&self, server_id: &str) {
        // Nodes are being made or removed: the allocator's pass does not wait behind them; the
        // next pass sweeps.
        let Ok(_one_at_a_time) = self.networks.try_lock() else {
            return;
        };
        let filters = HashMap::from([
            ("label", vec![format!("{LABEL_SERVER}={server_id}")]),
            ("dangling", vec!["true".to_string()]),
        ]);
        let options = ListNetworksOptionsBuilder::default()
            .filters(&filters)
            .build();
        let Ok(networks) = self.docker.list_networks(Some(options)).await else {
            return;
        };
        let empty: Vec<(String, String)> = networks
            .into_iter()
            .filter_map(|n| {
                let labels = n.labels.unwrap_or_default();
                let account = labels.get(LABEL_ACCOUNT)?;
                let ours = labels.get(LABEL_SERVER).map(String::as_str) == Some(server_id);
                (ours && !self.making_on(&network_name(server_id, account)))
                    .then_some((n.id?, n.name.unwrap_or_default()))
            })
            .collect();
        if !empty.is_empty() {
            self.remove_unheld(server_id, &empty).await;
        }
    }

    /// Removes those of `networks` (id, name) that no container of the installation is made
    /// on, running or not: a stopped node (deallocated, or its host restarting) holds no
    /// endpoint, so the engine would let its network go, and the node could never start
    /// again. Nothing is removed when the containers cannot be listed.
    async fn remove_unheld(&self, server_id: &str, networks: &[(String, String)]) {
        let filters = HashMap::from([("label", vec![format!("{LABEL_SERVER}={server_id}")])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let Ok(containers) = self.docker.list_containers(Some(options)).await else {
            return;
        };
        let mut held = HashSet::new();
        for c in containers {
            held.extend(c.host_config.and_then(|h| h.network_mode));
            for (name, endpoint) in c
                .network_settings
                .and_then(|n| n.networks)
                .unwrap_or_default()
            {
                held.insert(name);
                held.extend(endpoint.network_id);
            }
        }
        for (id, name) in networks {
            if !held.contains(id) && !held.contains(name) {
                self.remove_network(id).await;
            }
        }
    }

    /// Removes a network unless a container holds it (the engine refuses, 403).
    async fn remove_network(&self, id: &str) {
        match self.docker.remove_network(id).await {
            Err(e) if !matches!(status_of(&e), Some(403 | 404)) => {
                tracing::warn!(network = id, error = %e, "removing an account's network failed")
            }
            _ => {}
        }
    }
}

/// A node being made on a network: counted in `making_on` while it lives.
pub(super) struct MakingOn<'a> {
    making_on: &'a std::sync::Mutex<HashMap<String, usize>>,
    network: String,
}

impl Drop for MakingOn<'_> {
    fn drop(&mut self) {
        let mut making_on = self.making_on.lock().expect("lock");
        if let Some(count) = making_on.get_mut(&self.network) {
            *count -= 1;
            if *count == 0 {
                making_on.remove(&self.network);
            }
        }
    }
}
