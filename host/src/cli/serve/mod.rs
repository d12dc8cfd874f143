//! `weir serve`: the service's HTTP API on axum. The data path does not run here: each job
//! runs on threads of its own, as under `weir run`; tokio serves requests only.

mod auth;
pub mod routes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use weir::WasmEngine;
use weir::service::{ErrorCode, Service, ServiceOptions};

use auth::{Access, Tokens};
use routes::ApiError;

/// What every handler sees.
#[derive(Clone)]
pub struct AppState {
    service: Arc<Service>,
    tokens: Arc<Tokens>,
}

/// The largest JSON body a request may have.
const MAX_JSON_BODY: usize = 1024 * 1024;

/// How `weir serve` was started.
#[derive(Debug)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub tokens: Option<PathBuf>,
    pub max_component_size: u64,
}

/// Runs the server until Ctrl-C or SIGTERM; then stops every job at a checkpoint, to resume
/// at the next start.
pub fn serve(options: ServeOptions, engine: Arc<WasmEngine>) -> anyhow::Result<ExitCode> {
    let tokens = match &options.tokens {
        Some(path) => Tokens::load(path)?,
        None => Tokens::default(),
    };
    if tokens.is_empty() {
        if !options.listen.ip().is_loopback() {
            bail!(
                "weir serve without --tokens listens on loopback only (it would let anybody \
                 who reaches {} run code); give --tokens FILE, or --listen 127.0.0.1:<port>",
                options.listen
            );
        }
        tracing::warn!(
            "no --tokens: the API takes requests without a token, so it listens on loopback \
             ({}) only",
            options.listen
        );
    }
    let service = Service::open(
        ServiceOptions {
            data_dir: options.data_dir.clone(),
            max_component_size: options.max_component_size,
        },
        engine,
    )?;
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown_tx = std::sync::Mutex::new(Some(shutdown_tx));
    ctrlc::set_handler(
        move || match shutdown_tx.lock().ok().and_then(|mut t| t.take()) {
            Some(tx) => {
                eprintln!(
                    "weir serve: shutting down: jobs stop at a checkpoint and resume at the next \
                 start (Ctrl-C again to exit at once)"
                );
                let _ = tx.send(());
            }
            None => std::process::exit(130),
        },
    )
    .context("cannot install the Ctrl-C handler")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("http")
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    let state = AppState {
        service: Arc::clone(&service),
        tokens: Arc::new(tokens),
    };
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .with_context(|| format!("cannot listen on {}", options.listen))?;
        let addr = listener.local_addr()?;
        println!(
            "weir serve: listening on http://{addr} (data in {})",
            options.data_dir.display()
        );
        axum::serve(listener, app(state))
            .with_graceful_shutdown(async move {
                let _ = shutdown_rx.await;
            })
            .await
            .context("the HTTP server failed")
    })?;
    runtime.shutdown_background();
    service.shutdown();
    Ok(ExitCode::SUCCESS)
}

/// The whole HTTP application.
pub fn app(state: AppState) -> axum::Router {
    let (router, api) = routes::api();
    let document = api.to_pretty_json().expect("the document serializes");
    router
        .route(
            "/openapi.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], document) }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no such endpoint; the API is described at GET /openapi.json",
    )
}

async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!("this endpoint does not take {method}; see GET /openapi.json"),
    )
}

/// Lets a request through if it carries a token of the server (read-only tokens: reads only);
/// the health probe and the API document need none.
async fn authorize(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if state.tokens.is_empty() || path == "/health" || path == "/openapi.json" {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // The scheme's name is case-insensitive (RFC 7235).
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token);
    let access = presented.and_then(|t| state.tokens.check(t.trim().as_bytes()));
    match access {
        None => {
            let message = if presented.is_none() {
                "this server needs a token: send `Authorization: Bearer <token>` (the weir client \
                 reads it from WEIR_TOKEN)"
            } else {
                "the bearer token is not one of this server's; check WEIR_TOKEN"
            };
            let mut response = ApiError::new(ErrorCode::Unauthorized, message).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                "Bearer".parse().expect("a header value"),
            );
            response
        }
        Some(Access::ReadOnly) if !matches!(*request.method(), Method::GET | Method::HEAD) => {
            ApiError::new(
                ErrorCode::Forbidden,
                "this token is read-only: it can list and look, not change anything",
            )
            .into_response()
        }
        Some(_) => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_document_is_the_servers() {
        let committed = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json"),
        )
        .unwrap_or_default();
        assert!(
            committed.trim() == routes::document().trim(),
            "docs/openapi.json is not the server's document; regenerate it with `cargo xtask \
             openapi`"
        );
    }
}
