//! Adding "which stage, which worker" to an error without losing its kind.
//!
//! `spillway_core::Error` is not `Clone` (an `io::Error` is not), and its
//! variants carry different payloads, so the runtime needs two helpers of its
//! own: one that prefixes a context to whatever message the variant carries,
//! and one that makes a copy of the phase's first error for every other
//! worker that is woken by the cancellation.

use std::io;

use spillway_core::Error;

/// Prefixes `context` to the message of `error`, keeping its kind (and, for
/// [`Error::Io`], its operating-system error).
pub(crate) fn with_context(error: Error, context: &str) -> Error {
    match error {
        Error::InvalidArgument(message) => Error::InvalidArgument(format!("{context}: {message}")),
        Error::Corruption { file, offset, what } => Error::Corruption {
            file,
            offset,
            what: format!("{context}: {what}"),
        },
        Error::Io {
            context: inner,
            source,
        } => Error::Io {
            context: format!("{context}: {inner}"),
            source,
        },
        Error::ResourcesExhausted(message) => Error::ResourcesExhausted(format!("{context}: {message}")),
        Error::Poisoned(message) => Error::Poisoned(format!("{context}: {message}")),
        Error::Internal(message) => Error::Internal(format!("{context}: {message}")),
        Error::Interrupted(message) => Error::Interrupted(format!("{context}: {message}")),
        // A kind added to core later: keep the text, and flag it as ours to fix.
        other => Error::Internal(format!("{context}: {other}")),
    }
}

/// A copy of `error` with `context` prefixed: same kind, same errno for I/O
/// errors (the copy's `io::Error` is rebuilt from the raw errno when there is
/// one, else from the error kind and its text).
pub(crate) fn duplicate(error: &Error, context: &str) -> Error {
    let copy = match error {
        Error::InvalidArgument(message) => Error::InvalidArgument(message.clone()),
        Error::Corruption { file, offset, what } => Error::Corruption {
            file: file.clone(),
            offset: *offset,
            what: what.clone(),
        },
        Error::Io {
            context: inner,
            source,
        } => Error::Io {
            context: inner.clone(),
            source: match source.raw_os_error() {
                Some(errno) => io::Error::from_raw_os_error(errno),
                None => io::Error::new(source.kind(), source.to_string()),
            },
        },
        Error::ResourcesExhausted(message) => Error::ResourcesExhausted(message.clone()),
        Error::Poisoned(message) => Error::Poisoned(message.clone()),
        Error::Internal(message) => Error::Internal(message.clone()),
        Error::Interrupted(message) => Error::Interrupted(message.clone()),
        other => Error::Internal(other.to_string()),
    };
    with_context(copy, context)
}

/// The text of a panic payload (`panic!` with a literal or a formatted message).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::ErrorKind;

    #[test]
    fn context_keeps_kind_and_errno() {
        let error = Error::io("reading run 3", io::Error::from_raw_os_error(5));
        let wrapped = with_context(error, "stage 'reader' worker 2");
        assert_eq!(wrapped.kind(), ErrorKind::Io);
        assert_eq!(wrapped.raw_os_error(), Some(5));
        assert!(
            wrapped
                .to_string()
                .starts_with("stage 'reader' worker 2: reading run 3: "),
            "{wrapped}"
        );

        let copy = duplicate(&wrapped, "phase 'one' cancelled");
        assert_eq!(copy.kind(), ErrorKind::Io);
        assert_eq!(copy.raw_os_error(), Some(5));
        assert!(copy.to_string().contains("stage 'reader' worker 2"), "{copy}");
    }

    #[test]
    fn every_kind_is_kept() {
        let errors = [
            Error::InvalidArgument("a".into()),
            Error::corruption("/x", 7, "bad"),
            Error::ResourcesExhausted("b".into()),
            Error::Poisoned("c".into()),
            Error::Internal("d".into()),
            Error::io("e", io::Error::other("no errno")),
        ];
        for error in errors {
            let kind = error.kind();
            let copy = duplicate(&error, "ctx");
            assert_eq!(copy.kind(), kind);
            assert!(copy.to_string().contains("ctx: "), "{copy}");
            let wrapped = with_context(error, "ctx");
            assert_eq!(wrapped.kind(), kind);
            assert!(wrapped.to_string().contains("ctx: "), "{wrapped}");
        }
    }

    #[test]
    fn panic_messages() {
        assert_eq!(panic_message(&"literal"), "literal");
        assert_eq!(panic_message(&String::from("formatted 3")), "formatted 3");
        assert_eq!(panic_message(&17_u32), "a panic with a non-string payload");
    }
}
