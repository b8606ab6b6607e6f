//! The exception hierarchy (`backplane.BackplaneError` and its subclasses) and the mapping of
//! the runtime's and the importer's errors onto it. Messages are the runtime's own.
//!
//! The classes are made at module initialisation by calling `type(name, bases, namespace)`, so
//! that each can also derive from the built-in exception Python code already catches:
//! `InvalidArgument` is a `ValueError`, `NoSuchFile` a `FileNotFoundError`, `Unsupported` a
//! `NotImplementedError` and `Fail` a `RuntimeError`.

use backplane::onnx::OnnxError;
use backplane::RuntimeError;
use pyo3::exceptions::{
    PyException, PyFileNotFoundError, PyNotImplementedError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// Which exception class an error becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A wrong argument: unknown or missing input, wrong dtype or shape, unknown backend.
    InvalidArgument,
    /// A file that does not exist.
    NoSuchFile,
    /// A file that is not a valid ONNX model.
    InvalidGraph,
    /// An operator, attribute, data type or value kind that backplane (or no preferred backend)
    /// supports.
    Unsupported,
    /// Anything else that failed: a backend, an execution, a limit.
    Fail,
}

/// An error on its way to Python: the class and the runtime's message.
#[derive(Debug)]
pub struct Error {
    /// The class.
    pub kind: Kind,
    /// The message.
    pub message: String,
}

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// An invalid argument.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(Kind::InvalidArgument, message)
    }

    /// Something backplane does not support.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new(Kind::Unsupported, message)
    }

    /// A failure.
    pub fn fail(message: impl Into<String>) -> Self {
        Error::new(Kind::Fail, message)
    }
}

/// The result of the module's fallible operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Self {
        let kind = match &e {
            RuntimeError::MissingInput { .. }
            | RuntimeError::UnknownInput { .. }
            | RuntimeError::DuplicateInput(_)
            | RuntimeError::InputMismatch { .. }
            | RuntimeError::UnknownBackend { .. }
            | RuntimeError::NoBackends
            | RuntimeError::UnknownOverride(_) => Kind::InvalidArgument,
            RuntimeError::UnsupportedLayers { .. } => Kind::Unsupported,
            _ => Kind::Fail,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<OnnxError> for Error {
    fn from(e: OnnxError) -> Self {
        let kind = match &e {
            OnnxError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Kind::NoSuchFile
            }
            OnnxError::Decode { .. }
            | OnnxError::InvalidModel(_)
            | OnnxError::UnsupportedIrVersion { .. } => Kind::InvalidGraph,
            OnnxError::UnsupportedOps(_) | OnnxError::UnsupportedDataType { .. } => {
                Kind::Unsupported
            }
            OnnxError::UnknownInput { .. } => Kind::InvalidArgument,
            _ => Kind::Fail,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<backplane::Error> for Error {
    fn from(e: backplane::Error) -> Self {
        match e {
            backplane::Error::Runtime(e) => e.into(),
            backplane::Error::Onnx(e) => e.into(),
            backplane::Error::Invalid(m) => Error::invalid(m),
            e => Error::fail(e.to_string()),
        }
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        Python::attach(|py| match class(py, e.kind) {
            Some(cls) => PyErr::from_type(cls, e.message),
            // Only before the module finished initialising: the closest built-in class.
            None => match e.kind {
                Kind::InvalidArgument => PyValueError::new_err(e.message),
                Kind::NoSuchFile => PyFileNotFoundError::new_err(e.message),
                Kind::Unsupported => PyNotImplementedError::new_err(e.message),
                Kind::InvalidGraph | Kind::Fail => PyRuntimeError::new_err(e.message),
            },
        })
    }
}

static BACKPLANE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INVALID_ARGUMENT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static NO_SUCH_FILE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INVALID_GRAPH: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNSUPPORTED: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static FAIL: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn cell(kind: Kind) -> &'static PyOnceLock<Py<PyType>> {
    match kind {
        Kind::InvalidArgument => &INVALID_ARGUMENT,
        Kind::NoSuchFile => &NO_SUCH_FILE,
        Kind::InvalidGraph => &INVALID_GRAPH,
        Kind::Unsupported => &UNSUPPORTED,
        Kind::Fail => &FAIL,
    }
}

fn class(py: Python<'_>, kind: Kind) -> Option<Bound<'_, PyType>> {
    cell(kind).get(py).map(|c| c.bind(py).clone())
}

/// `type(name, bases, {"__module__": "backplane", "__doc__": doc})`.
fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Vec<Bound<'py, PyType>>,
    doc: &str,
) -> PyResult<Bound<'py, PyType>> {
    let namespace = PyDict::new(py);
    namespace.set_item("__module__", "backplane")?;
    namespace.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, bases)?;
    Ok(py
        .get_type::<PyType>()
        .call1((name, bases, namespace))?
        .cast_into::<PyType>()?)
}

/// Create the exception classes and add them to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = make_class(
        py,
        "BackplaneError",
        vec![py.get_type::<PyException>()],
        "Base class of every error backplane raises.",
    )?;
    let subclasses: [(Kind, &str, Bound<'_, PyType>, &str); 5] = [
        (
            Kind::InvalidArgument,
            "InvalidArgument",
            py.get_type::<PyValueError>(),
            "A wrong argument: an unknown or missing input or output name, an input of the \
             wrong dtype or shape, an unknown backend or option.",
        ),
        (
            Kind::NoSuchFile,
            "NoSuchFile",
            py.get_type::<PyFileNotFoundError>(),
            "The model file does not exist.",
        ),
        (
            Kind::InvalidGraph,
            "InvalidGraph",
            py.get_type::<PyException>(),
            "The model is not a valid ONNX model (not a protobuf, breaks the specification, \
             too new an IR version).",
        ),
        (
            Kind::Unsupported,
            "Unsupported",
            py.get_type::<PyNotImplementedError>(),
            "The model uses an operator, attribute or data type that backplane, or none of \
             the preferred backends, supports.",
        ),
        (
            Kind::Fail,
            "Fail",
            py.get_type::<PyRuntimeError>(),
            "An import, a backend or an execution failed.",
        ),
    ];
    m.add("BackplaneError", &base)?;
    let _ = BACKPLANE_ERROR.set(py, base.clone().unbind());
    for (kind, name, builtin, doc) in subclasses {
        // InvalidGraph derives from BackplaneError alone: the built-in Exception is already
        // its base's base.
        let bases = if kind == Kind::InvalidGraph {
            vec![base.clone()]
        } else {
            vec![base.clone(), builtin]
        };
        let cls = make_class(py, name, bases, doc)?;
        m.add(name, &cls)?;
        let _ = cell(kind).set(py, cls.unbind());
    }
    Ok(())
}
