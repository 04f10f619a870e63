//! The runner endpoints: legacy registration (§3.1), verify (§3.2), unregister (§3.3) and
//! token reset (§3.4).

use bytes::Bytes;
use chrono::{DateTime, Utc};
use reqwest::Method;
use serde::{Deserialize, Serialize};

use super::client::{Body, Call, Client, Reply};
use super::error::GitlabError;
use super::info::Info;
use super::observer::Endpoint;

/// What `register` sends for a legacy registration token.
#[derive(Debug, Clone, Default)]
pub struct RegisterParams {
    /// The registration token.
    pub registration_token: String,
    /// `description`.
    pub description: String,
    /// `maintenance_note`.
    pub maintenance_note: String,
    /// Tags (sent comma-separated).
    pub tag_list: Vec<String>,
    /// `run_untagged`.
    pub run_untagged: bool,
    /// `locked`.
    pub locked: bool,
    /// `paused`.
    pub paused: bool,
    /// `not_protected` or `ref_protected` (empty: omitted).
    pub access_level: String,
    /// Seconds (0: omitted).
    pub maximum_timeout: i64,
}

#[derive(Serialize)]
struct RegisterBody<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    maintenance_note: &'a str,
    #[serde(skip_serializing_if = "String::is_empty")]
    tag_list: String,
    run_untagged: bool,
    locked: bool,
    paused: bool,
    #[serde(skip_serializing_if = "str::is_empty")]
    access_level: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    maximum_timeout: i64,
    info: Info,
    token: &'a str,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A runner's credentials as GitLab returns them from register, verify and reset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunnerCredentials {
    /// The runner ID (0 when GitLab did not send one).
    pub id: i64,
    /// The authentication token (empty when GitLab did not send one).
    pub token: String,
    /// When the token expires; `None` means never (null, missing or the zero time).
    pub token_expires_at: Option<DateTime<Utc>>,
}

/// The answer body, read leniently: any field may be missing or null; a wrong type is
/// reported, not a panic.
#[derive(Deserialize, Default)]
#[serde(default)]
struct CredentialsBody {
    id: Option<serde_json::Value>,
    token: Option<String>,
    token_expires_at: Option<String>,
}

impl CredentialsBody {
    fn into_credentials(
        self,
        endpoint: Endpoint,
        status: u16,
    ) -> Result<RunnerCredentials, GitlabError> {
        let bad = |message: String| GitlabError::Decode {
            endpoint: endpoint.as_str(),
            status,
            message,
        };
        let id = match self.id {
            None | Some(serde_json::Value::Null) => 0,
            Some(serde_json::Value::Number(n)) => n
                .as_i64()
                .ok_or_else(|| bad(format!("runner id {n} is not an integer")))?,
            Some(serde_json::Value::String(s)) => s
                .trim()
                .parse()
                .map_err(|_| bad(format!("runner id {s:?} is not an integer")))?,
            Some(other) => return Err(bad(format!("runner id {other} is not an integer"))),
        };
        let token_expires_at = match self.token_expires_at.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => {
                let at = DateTime::parse_from_rfc3339(text)
                    .map_err(|e| bad(format!("token_expires_at {text:?}: {e}")))?
                    .with_timezone(&Utc);
                (at.timestamp() > 0).then_some(at)
            }
        };
        Ok(RunnerCredentials {
            id,
            token: self.token.unwrap_or_default(),
            token_expires_at,
        })
    }
}

fn credentials(reply: &Reply, endpoint: Endpoint) -> Result<RunnerCredentials, GitlabError> {
    reply
        .json::<CredentialsBody>(endpoint)?
        .into_credentials(endpoint, reply.status)
}

fn json(value: &impl Serialize) -> Result<Bytes, GitlabError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| GitlabError::Client(format!("cannot encode the request: {e}")))
}

#[derive(Serialize)]
struct TokenBody<'a> {
    token: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_id: Option<&'a str>,
}

impl Client {
    async fn runner_call(
        &self,
        endpoint: Endpoint,
        method: Method,
        path: &str,
        token: &str,
        body: Bytes,
        accept_json: bool,
    ) -> Result<Reply, GitlabError> {
        self.call(&Call {
            endpoint,
            method,
            path: path.into(),
            headers: vec![("RUNNER-TOKEN", token.to_owned())],
            body: Body::Json(body),
            accept_json,
        })
        .await
    }

    /// `POST /runners` with a legacy registration token; 201 gives the new runner.
    pub async fn register_runner(
        &self,
        params: &RegisterParams,
    ) -> Result<RunnerCredentials, GitlabError> {
        let endpoint = Endpoint::RegisterRunner;
        let body = json(&RegisterBody {
            description: &params.description,
            maintenance_note: &params.maintenance_note,
            tag_list: params.tag_list.join(","),
            run_untagged: params.run_untagged,
            locked: params.locked,
            paused: params.paused,
            access_level: &params.access_level,
            maximum_timeout: params.maximum_timeout,
            info: Info::registration(),
            token: &params.registration_token,
        })?;
        let reply = self
            .runner_call(
                endpoint,
                Method::POST,
                "runners",
                &params.registration_token,
                body,
                true,
            )
            .await?;
        match reply.status {
            201 => credentials(&reply, endpoint),
            403 => Err(GitlabError::Status {
                endpoint: endpoint.as_str(),
                status: 403,
                message: Some("forbidden (check registration token)".into()),
            }),
            410 => Err(GitlabError::Status {
                endpoint: endpoint.as_str(),
                status: 410,
                message: Some(reply.message().unwrap_or_else(|| {
                    "GitLab has disabled registration tokens; create the runner in GitLab and \
                     register with its glrt- token"
                        .into()
                })),
            }),
            _ => Err(reply.error(endpoint)),
        }
    }

    /// `POST /runners/verify`. `Ok` means valid (200); the credentials are empty when an old
    /// GitLab answered the text `200`. A 403 comes back as [`GitlabError::Status`] with status
    /// 403, the only answer that means "this runner does not exist".
    pub async fn verify_runner(
        &self,
        token: &str,
        info: &Info,
        system_id: &str,
    ) -> Result<RunnerCredentials, GitlabError> {
        let endpoint = Endpoint::VerifyRunner;
        #[derive(Serialize)]
        struct VerifyBody<'a> {
            info: &'a Info,
            token: &'a str,
            system_id: &'a str,
        }
        let body = json(&VerifyBody {
            info,
            token,
            system_id,
        })?;
        let reply = self
            .runner_call(endpoint, Method::POST, "runners/verify", token, body, true)
            .await?;
        match reply.status {
            200 if reply.is_json() => credentials(&reply, endpoint),
            // Old GitLab answers a plain-text "200".
            200 => Ok(RunnerCredentials::default()),
            _ => Err(reply.error(endpoint)),
        }
    }

    /// `DELETE /runners`: deletes the whole runner (legacy tokens). 204 is success.
    pub async fn unregister_runner(&self, token: &str) -> Result<(), GitlabError> {
        let endpoint = Endpoint::UnregisterRunner;
        let body = json(&TokenBody {
            token,
            system_id: None,
        })?;
        let reply = self
            .runner_call(endpoint, Method::DELETE, "runners", token, body, false)
            .await?;
        match reply.status {
            204 => Ok(()),
            _ => Err(reply.error(endpoint)),
        }
    }

    /// `DELETE /runners/managers`: deletes only this manager (`glrt-` tokens). 204 is success.
    pub async fn unregister_manager(
        &self,
        token: &str,
        system_id: &str,
    ) -> Result<(), GitlabError> {
        let endpoint = Endpoint::UnregisterManager;
        let body = json(&TokenBody {
            token,
            system_id: Some(system_id),
        })?;
        let reply = self
            .runner_call(
                endpoint,
                Method::DELETE,
                "runners/managers",
                token,
                body,
                false,
            )
            .await?;
        match reply.status {
            204 => Ok(()),
            _ => Err(reply.error(endpoint)),
        }
    }

    /// `POST /runners/reset_authentication_token` with the current token; 201 gives the new
    /// token (the ID is kept by the caller).
    pub async fn reset_token(&self, token: &str) -> Result<RunnerCredentials, GitlabError> {
        let endpoint = Endpoint::ResetToken;
        let body = json(&TokenBody {
            token,
            system_id: None,
        })?;
        let reply = self
            .runner_call(
                endpoint,
                Method::POST,
                "runners/reset_authentication_token",
                token,
                body,
                true,
            )
            .await?;
        match reply.status {
            201 => credentials(&reply, endpoint),
            _ => Err(reply.error(endpoint)),
        }
    }

    /// `POST /runners/:id/reset_authentication_token` with a personal access token.
    pub async fn reset_token_with_pat(
        &self,
        runner_id: i64,
        pat: &str,
    ) -> Result<RunnerCredentials, GitlabError> {
        let endpoint = Endpoint::ResetToken;
        let reply = self
            .call(&Call {
                endpoint,
                method: Method::POST,
                path: format!("runners/{runner_id}/reset_authentication_token"),
                headers: vec![("PRIVATE-TOKEN", pat.to_owned())],
                body: Body::Empty,
                accept_json: true,
            })
            .await?;
        match reply.status {
            201 => credentials(&reply, endpoint),
            _ => Err(reply.error(endpoint)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<RunnerCredentials, GitlabError> {
        serde_json::from_str::<CredentialsBody>(text)
            .map_err(|e| GitlabError::Client(e.to_string()))?
            .into_credentials(Endpoint::VerifyRunner, 200)
    }

    #[test]
    fn lenient_credentials() {
        let c = read(r#"{"id": 7, "token": "glrt-x", "token_expires_at": null, "extra": [1]}"#)
            .unwrap();
        assert_eq!(
            (c.id, c.token.as_str(), c.token_expires_at),
            (7, "glrt-x", None)
        );
        let c = read(r#"{"id": "8", "token_expires_at": "0001-01-01T00:00:00Z"}"#).unwrap();
        assert_eq!((c.id, c.token_expires_at), (8, None));
        let c = read(r#"{"token_expires_at": "2030-01-02T03:04:05Z"}"#).unwrap();
        assert_eq!(
            c.token_expires_at.unwrap().to_rfc3339(),
            "2030-01-02T03:04:05+00:00"
        );
        assert!(read(r#"{"id": [1]}"#)
            .unwrap_err()
            .to_string()
            .contains("not an integer"));
        assert!(read(r#"{"id": 1.5}"#).is_err());
        assert!(read(r#"{"token": 5}"#).is_err());
    }
}
