//! Error mapping: walnut's errors and notices as pgwire's ErrorResponse and NoticeResponse.
//!
//! An [`Error`] becomes ERROR-level (`user_error`: the statement failed, the connection
//! goes on) or FATAL-level (`fatal_error`: the backend thread is gone, or startup failed);
//! pgwire sends either as ErrorResponse, and `ErrorHandler::on_error` logs what it sends.
//! Protocol violations the front end itself detects carry SQLSTATE 08P01
//! (`protocol_error`).

use super::Conn;
use pgwire::api::{ClientInfo, ErrorHandler};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::PgWireBackendMessage;
use walnut_common::{Error, SqlState};
use walnut_sql::session::Notice;

/// ErrorInfo for a walnut error with the given severity.
pub(super) fn error_info(e: &Error, severity: &str) -> ErrorInfo {
    let mut info = ErrorInfo::new(
        severity.to_string(),
        e.sqlstate.0.to_string(),
        e.message.clone(),
    );
    info.severity_nonlocalized = Some(severity.to_string());
    info.detail = e.detail.clone();
    info
}

/// A walnut error as an ERROR-level pgwire error.
pub(super) fn user_error(e: &Error) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e, "ERROR")))
}

/// A walnut error that ends the connection.
pub(super) fn fatal_error(e: &Error) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e, "FATAL")))
}

pub(super) fn error_message(e: &Error) -> PgWireBackendMessage {
    PgWireBackendMessage::ErrorResponse(error_info(e, "ERROR").into())
}

pub(super) fn notice_message(n: &Notice) -> PgWireBackendMessage {
    let mut info = ErrorInfo::new(
        n.severity.to_string(),
        n.sqlstate.0.to_string(),
        n.message.clone(),
    );
    info.severity_nonlocalized = Some(n.severity.to_string());
    info.detail = n.detail.clone();
    PgWireBackendMessage::NoticeResponse(info.into())
}

pub(super) fn protocol_error(message: impl Into<String>) -> Error {
    Error::user(SqlState::PROTOCOL_VIOLATION, message)
}

impl ErrorHandler for Conn {
    fn on_error<C: ClientInfo>(&self, _client: &C, error: &mut PgWireError) {
        tracing::debug!(code = error.code(), "error sent to client: {error}");
    }
}
