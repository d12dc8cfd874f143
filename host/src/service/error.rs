//! The service's errors: a stable code a program can act on, and a message for a person that
//! names the thing and the fix.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What kind of error, as the API reports it in `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed: bad JSON, a bad parameter, a bad id.
    InvalidRequest,
    /// The job spec is invalid.
    InvalidSpec,
    /// The uploaded file is no usable weir component.
    InvalidComponent,
    /// The body is larger than allowed.
    TooLarge,
    /// No such job, component, operation or savepoint.
    NotFound,
    /// The request conflicts with what is there: a component in use, a job that has ended,
    /// a request id reused for another operation.
    Conflict,
    /// A savepoint (or checkpoint) that cannot be restored into the job.
    SavepointDoesNotFit,
    /// No token, or a wrong one.
    Unauthorized,
    /// A read-only token tried to change something.
    Forbidden,
    /// The path exists, the method does not.
    MethodNotAllowed,
    /// A body of a type the endpoint does not take.
    UnsupportedMediaType,
    /// Something failed in the service itself (a disk, a bug); the message says what.
    Internal,
}

impl ErrorCode {
    /// The HTTP status that goes with it.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest
            | ErrorCode::InvalidSpec
            | ErrorCode::InvalidComponent
            | ErrorCode::SavepointDoesNotFit => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::Conflict => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::Internal => 500,
        }
    }
}

/// An error of the service, as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, thiserror::Error)]
#[error("{message}")]
pub struct ServiceError {
    /// What kind of error.
    pub code: ErrorCode,
    /// What went wrong and what to do.
    pub message: String,
}

impl ServiceError {
    /// An error of kind `code`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ServiceError {
        ServiceError {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> ServiceError {
        ServiceError::new(ErrorCode::InvalidRequest, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ServiceError {
        ServiceError::new(ErrorCode::NotFound, message)
    }

    pub(crate) fn conflict(message: impl Into<String>) -> ServiceError {
        ServiceError::new(ErrorCode::Conflict, message)
    }

    /// A failure of the service's own storage: `action` on `path`.
    pub(crate) fn io(action: &str, path: &std::path::Path, e: std::io::Error) -> ServiceError {
        ServiceError::new(
            ErrorCode::Internal,
            format!("cannot {action} {}: {e}", path.display()),
        )
    }
}
