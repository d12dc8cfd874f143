//! The HTTP API of `weir serve`: one handler per endpoint, each documented for the OpenAPI
//! document (`GET /openapi.json`, committed as `docs/openapi.json`).
//!
//! Errors are JSON `{"code": ..., "message": ...}` ([`ServiceError`]): a stable code and a
//! message that names the thing and the fix. Work that blocks (compiling a component, starting
//! a job, waiting for a lock) runs on tokio's blocking threads; jobs run on threads of their own.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use weir::service::api::{
    Checkpoints, ComponentInfo, Exceptions, JobDetails, JobOverview, Operation, RescaleRequest,
    RollbackRequest, SavepointRequest, StopRequest, SubmitRequest, UpgradeRequest,
};
use weir::service::{ErrorCode, ServiceError};

use super::AppState;

/// An error answer.
#[derive(Debug)]
pub struct ApiError(pub ServiceError);

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError(ServiceError::new(code, message))
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // An error may come before the request's body was read, and hyper closes such a
        // connection: saying so keeps a client from sending its next request on it.
        let close = [(header::CONNECTION, "close")];
        (status, close, Json(self.0)).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let code = match &r {
            JsonRejection::MissingJsonContentType(_) => ErrorCode::UnsupportedMediaType,
            _ if r.status() == StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::TooLarge,
            _ => ErrorCode::InvalidRequest,
        };
        ApiError::new(
            code,
            format!("the request body is not accepted: {}", r.body_text()),
        )
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::new(ErrorCode::InvalidRequest, r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::new(ErrorCode::InvalidRequest, r.body_text())
    }
}

/// `axum::Json` with errors in the API's format.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// `axum::extract::Path` with errors in the API's format.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// `axum::extract::Query` with errors in the API's format.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

type ApiResult<T> = Result<T, ApiError>;

/// How much of an upload past its size limit is read (and dropped) before the answer.
const MAX_DROPPED: usize = 64 << 20;

/// Runs blocking service work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("a worker failed: {e}")))?
        .map_err(ApiError)
}

/// The API's document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "weir",
        description = "The HTTP API of `weir serve`: upload WebAssembly operators, run jobs, \
                       take savepoints, stop, cancel and rescale jobs. Every request but \
                       `GET /health` and `GET /openapi.json` needs `Authorization: Bearer \
                       <token>` when the server has tokens.",
        license(name = "MIT OR Apache-2.0")
    ),
    components(schemas(ServiceError, ErrorCode)),
    modifiers(&Security),
    tags(
        (name = "service", description = "The server itself"),
        (name = "components", description = "Uploaded operators, by content"),
        (name = "jobs", description = "Jobs and what can be done to them"),
    )
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Documents the error answers every endpoint may give: a bad request, no or a wrong token,
/// a read-only token that tries to change something, what is not there, a conflict, a body
/// too large or of the wrong type, an error of the service itself.
struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ServiceError")))
                            .build(),
                    )
                    .build(),
            )
        };
        for (path, item) in openapi.paths.paths.iter_mut() {
            let public = path == "/health";
            let operations = [
                (&mut item.get, false),
                (&mut item.post, true),
                (&mut item.delete, true),
            ];
            for (op, changes) in operations {
                let Some(op) = op else { continue };
                let responses = &mut op.responses.responses;
                let mut add = |status: &str, description: &str| {
                    responses
                        .entry(status.to_string())
                        .or_insert_with(|| error(description));
                };
                add(
                    "400",
                    "The request is malformed or names something invalid.",
                );
                add("404", "No such job, component or operation.");
                add("405", "The path does not take this method.");
                add("500", "The service itself failed; the message says how.");
                if !public {
                    add("401", "No bearer token, or not one of the server's.");
                }
                if changes {
                    add("403", "A read-only token cannot change anything.");
                    add("409", "It conflicts with what is there.");
                    add("413", "The body is too large.");
                    add("415", "The body is of a type the endpoint does not take.");
                }
                if !public {
                    op.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
                        "bearer",
                        Vec::<String>::new(),
                    )]);
                }
            }
        }
    }
}

/// The routes and their document (with the error answers of every endpoint).
pub fn api() -> (axum::Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, mut api) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health))
        .routes(routes!(upload_component, list_components))
        .routes(routes!(get_component, delete_component))
        .routes(routes!(submit_job, list_jobs))
        .routes(routes!(get_job, delete_job))
        .routes(routes!(job_checkpoints))
        .routes(routes!(job_exceptions))
        .routes(routes!(cancel_job))
        .routes(routes!(stop_job))
        .routes(routes!(trigger_savepoint))
        .routes(routes!(rescale_job))
        .routes(routes!(upgrade_job))
        .routes(routes!(roll_back_job))
        .routes(routes!(get_operation))
        .split_for_parts();
    ErrorResponses.modify(&mut api);
    (router, api)
}

/// The answer of the health probe.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// Always `ok` when the server answers.
    pub status: String,
    /// The server's version.
    pub version: String,
}

/// Whether the server answers (no token needed).
#[utoipa::path(get, path = "/health", tag = "service",
    responses((status = 200, description = "The server answers", body = Health)))]
async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// Name and version of an upload.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UploadParams {
    /// A name a spec can refer to the component by.
    name: Option<String>,
    /// Its version (`name@version` in a spec); needs `name`.
    version: Option<String>,
}

/// The bytes of a `.wasm` component.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct WasmBytes(#[allow(dead_code)] Vec<u8>);

/// Uploads a component: the raw bytes of a `.wasm` file, streamed to disk within the size
/// limit, then validated and compiled as `weir validate` would. An invalid one is refused with
/// the reason, and nothing of it is kept. Uploading bytes already there answers the existing
/// component.
#[utoipa::path(post, path = "/v1/components", tag = "components", params(UploadParams),
    request_body(content = WasmBytes, content_type = "application/octet-stream",
        description = "The .wasm file's bytes (`application/wasm` is taken too)"),
    responses((status = 201, description = "The component, kept", body = ComponentInfo)))]
async fn upload_component(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<UploadParams>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<ComponentInfo>)> {
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/wasm");
    let essence = kind.split(';').next().unwrap_or("").trim();
    if !matches!(essence, "application/wasm" | "application/octet-stream") {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!(
                "a component is uploaded as the raw bytes of the .wasm file with Content-Type \
                 application/wasm, not {kind}"
            ),
        ));
    }
    let service = Arc::clone(&state.service);
    let mut upload = {
        let service = Arc::clone(&service);
        blocking(move || service.begin_upload(params.name, params.version)).await?
    };
    let mut stream = body.into_data_stream();
    // Past the size limit the rest is read and dropped (up to a bound), so that a client
    // that sends the whole body before it reads gets the answer rather than a reset.
    let (mut refused, mut dropped) = (None, 0usize);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("the upload was cut off ({e}); nothing was kept, upload it again"),
            )
        })?;
        if refused.is_some() {
            dropped += chunk.len();
            if dropped > MAX_DROPPED {
                break;
            }
        } else if let Err(e) = upload.write(&chunk) {
            refused = Some(e);
        }
    }
    if let Some(e) = refused {
        return Err(e.into());
    }
    let info = blocking(move || service.finish_upload(upload)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// Lists every component.
#[utoipa::path(get, path = "/v1/components", tag = "components",
    responses((status = 200, description = "Every component", body = Vec<ComponentInfo>)))]
async fn list_components(State(state): State<AppState>) -> ApiResult<Json<Vec<ComponentInfo>>> {
    Ok(Json(state.service.components()))
}

/// Path of a component.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ComponentPath {
    /// Its SHA-256, 64 hex digits.
    sha256: String,
}

/// One component: size, hash, world and imports, when it was uploaded, which jobs use it.
#[utoipa::path(get, path = "/v1/components/{sha256}", tag = "components", params(ComponentPath),
    responses((status = 200, description = "The component", body = ComponentInfo)))]
async fn get_component(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<ComponentPath>,
) -> ApiResult<Json<ComponentInfo>> {
    Ok(Json(state.service.component(&path.sha256)?))
}

/// Deletes a component; refused while a job uses it.
#[utoipa::path(delete, path = "/v1/components/{sha256}", tag = "components",
    params(ComponentPath), responses((status = 204, description = "Deleted")))]
async fn delete_component(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<ComponentPath>,
) -> ApiResult<StatusCode> {
    let service = Arc::clone(&state.service);
    blocking(move || service.delete_component(&path.sha256)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Submits a job and starts it, optionally from a savepoint.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", request_body = SubmitRequest,
    responses((status = 201, description = "The job, started", body = JobOverview)))]
async fn submit_job(
    State(state): State<AppState>,
    ApiJson(request): ApiJson<SubmitRequest>,
) -> ApiResult<(StatusCode, Json<JobOverview>)> {
    let service = Arc::clone(&state.service);
    let job = blocking(move || service.submit(request)).await?;
    Ok((StatusCode::CREATED, Json(job)))
}

/// Lists every job, newest first, with its status.
#[utoipa::path(get, path = "/v1/jobs", tag = "jobs",
    responses((status = 200, description = "Every job", body = Vec<JobOverview>)))]
async fn list_jobs(State(state): State<AppState>) -> Json<Vec<JobOverview>> {
    Json(state.service.list())
}

/// Path of a job.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct JobPath {
    /// The job's id, 32 hex digits.
    id: String,
}

/// A job's whole status: vertices with records in and out and rates, checkpoints,
/// operations, its spec.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", params(JobPath),
    responses((status = 200, description = "The job", body = JobDetails)))]
async fn get_job(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
) -> ApiResult<Json<JobDetails>> {
    Ok(Json(state.service.details(&path.id)?))
}

/// Deletes a job that has ended (finished, failed, cancelled or stopped): its record,
/// checkpoints and state; its savepoints stay. The components it used can be deleted then.
#[utoipa::path(delete, path = "/v1/jobs/{id}", tag = "jobs", params(JobPath),
    responses((status = 204, description = "Deleted")))]
async fn delete_job(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
) -> ApiResult<StatusCode> {
    let service = Arc::clone(&state.service);
    blocking(move || service.delete_job(&path.id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A job's checkpoint history.
#[utoipa::path(get, path = "/v1/jobs/{id}/checkpoints", tag = "jobs", params(JobPath),
    responses((status = 200, description = "Its checkpoints", body = Checkpoints)))]
async fn job_checkpoints(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
) -> ApiResult<Json<Checkpoints>> {
    Ok(Json(state.service.checkpoints(&path.id)?))
}

/// A job's failures: cause, operator, uid, subtask, time.
#[utoipa::path(get, path = "/v1/jobs/{id}/exceptions", tag = "jobs", params(JobPath),
    responses((status = 200, description = "Its failures", body = Exceptions)))]
async fn job_exceptions(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
) -> ApiResult<Json<Exceptions>> {
    Ok(Json(state.service.exceptions(&path.id)?))
}

/// Cancels a job: its tasks end at once; output after its last checkpoint is not committed.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "jobs", params(JobPath),
    responses((status = 202, description = "Cancelling", body = JobOverview)))]
async fn cancel_job(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
    // Read (and ignored) so that a body sent along does not end the connection: hyper
    // closes one whose request body was left unread, and a client reusing it would fail.
    _body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<JobOverview>)> {
    Ok((StatusCode::ACCEPTED, Json(state.service.cancel(&path.id)?)))
}

/// Stops a job with a savepoint (or at a checkpoint, or draining its input first). Answers
/// at once; poll the operation.
#[utoipa::path(post, path = "/v1/jobs/{id}/stop", tag = "jobs", params(JobPath),
    request_body = StopRequest,
    responses((status = 202, description = "Stopping", body = Operation)))]
async fn stop_job(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
    ApiJson(request): ApiJson<StopRequest>,
) -> ApiResult<(StatusCode, Json<Operation>)> {
    Ok((
        StatusCode::ACCEPTED,
        Json(state.service.stop(&path.id, request)?),
    ))
}

/// Takes a savepoint; the job goes on. Answers at once; poll the operation. A `request_id`
/// given again answers the same operation.
#[utoipa::path(post, path = "/v1/jobs/{id}/savepoints", tag = "jobs", params(JobPath),
    request_body = SavepointRequest,
    responses((status = 202, description = "Taking it", body = Operation)))]
async fn trigger_savepoint(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
    ApiJson(request): ApiJson<SavepointRequest>,
) -> ApiResult<(StatusCode, Json<Operation>)> {
    Ok((
        StatusCode::ACCEPTED,
        Json(state.service.savepoint(&path.id, request)?),
    ))
}

/// Changes the parallelism of operators: a stop with a savepoint and a restart from it at
/// the new parallelism. Answers at once; poll the operation.
#[utoipa::path(post, path = "/v1/jobs/{id}/rescale", tag = "jobs", params(JobPath),
    request_body = RescaleRequest,
    responses((status = 202, description = "Rescaling", body = Operation)))]
async fn rescale_job(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
    ApiJson(request): ApiJson<RescaleRequest>,
) -> ApiResult<(StatusCode, Json<Operation>)> {
    let service = Arc::clone(&state.service);
    let op = blocking(move || service.rescale(&path.id, request)).await?;
    Ok((StatusCode::ACCEPTED, Json(op)))
}

/// Replaces the code (and optionally the config) of operators while the job runs, keeping
/// their state: the new components are loaded first (one that does not load is refused and
/// nothing changes), then every subtask of every named operator switches at one checkpoint
/// barrier. During its probation a failure of the new code rolls the job back to the old code
/// from that checkpoint. Answers at once; poll the operation, and see the job's `upgrades`.
#[utoipa::path(post, path = "/v1/jobs/{id}/upgrade", tag = "jobs", params(JobPath),
    request_body = UpgradeRequest,
    responses((status = 202, description = "Upgrading", body = Operation)))]
async fn upgrade_job(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
    ApiJson(request): ApiJson<UpgradeRequest>,
) -> ApiResult<(StatusCode, Json<Operation>)> {
    let service = Arc::clone(&state.service);
    let op = blocking(move || service.upgrade(&path.id, request)).await?;
    Ok((StatusCode::ACCEPTED, Json(op)))
}

/// Back to the previous code: the upgrade on probation is rolled back, or else the last
/// committed upgrade is undone by an upgrade to the operators as they were before it (code,
/// config, limits). Answers at once; poll the operation.
#[utoipa::path(post, path = "/v1/jobs/{id}/rollback", tag = "jobs", params(JobPath),
    request_body = RollbackRequest,
    responses((status = 202, description = "Rolling back", body = Operation)))]
async fn roll_back_job(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<JobPath>,
    ApiJson(request): ApiJson<RollbackRequest>,
) -> ApiResult<(StatusCode, Json<Operation>)> {
    let service = Arc::clone(&state.service);
    let op = blocking(move || service.roll_back(&path.id, request)).await?;
    Ok((StatusCode::ACCEPTED, Json(op)))
}

/// Path of an operation.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct OperationPath {
    /// The job's id.
    id: String,
    /// The operation's request id.
    request_id: String,
}

/// An operation: in progress, completed (with its savepoint), or failed (with the reason).
#[utoipa::path(get, path = "/v1/jobs/{id}/operations/{request_id}", tag = "jobs",
    params(OperationPath),
    responses((status = 200, description = "The operation", body = Operation)))]
async fn get_operation(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<OperationPath>,
) -> ApiResult<Json<Operation>> {
    Ok(Json(state.service.operation(&path.id, &path.request_id)?))
}

/// The document, as JSON (what `weir openapi` prints and `docs/openapi.json` holds).
pub fn document() -> String {
    api().1.to_pretty_json().expect("the document serializes")
}
