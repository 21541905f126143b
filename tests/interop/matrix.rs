//! The configurations the data-path tests run under: how the export is
//! stored ([`Backend`]), the buffer cache in front of it ([`Cache`]) and
//! how replies are scheduled ([`Pipeline`]). A test takes a [`Cell`]'s
//! parts as `rstest` parameters, so `cargo test --test interop` runs
//! every combination it lists, each as its own test named after its
//! values:
//!
//! ```ignore
//! #[rstest]
//! fn round_trip(
//!     #[values(Mem, File)] backend: Backend,
//!     #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
//! ) {
//!     let dir = tempdir();
//!     let srv = Cell::new(backend, cache, Flexible)
//!         .server(&dir, &[("disk", "16M")])
//!         .start();
//! }
//! ```
//!
//! Which tests take which dimensions: the ones that move data through the
//! server (qemu-io, qemu-img convert, nbdcopy, nbdsh, fio, the raw
//! protocol round trips, multi-conn) take backend x cache; the ones whose
//! clients keep many requests in flight (fio at queue depth 32, 64 libnbd
//! AIO requests) take all three. Listing, TLS, limits, listeners, faults,
//! shutdown and crash tests run in the one configuration they set up.

use std::fmt;
use std::path::Path;

use crate::harness::ServerBuilder;

/// Where the export's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `mem:SIZE`.
    Mem,
    /// `file:PATH,size=SIZE`, a sparse file in the test's directory.
    File,
}

/// `--cache`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cache {
    Uncached,
    WriteThrough,
    WriteBack,
}

/// `--pipeline`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pipeline {
    Off,
    Fixed,
    Flexible,
}

impl Cache {
    fn arg(self) -> &'static str {
        match self {
            Self::Uncached => "none",
            Self::WriteThrough => "writethrough",
            Self::WriteBack => "writeback",
        }
    }
}

impl Pipeline {
    fn arg(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Fixed => "fixed",
            Self::Flexible => "flexible",
        }
    }
}

/// One configuration of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    pub(crate) backend: Backend,
    pub(crate) cache: Cache,
    pub(crate) pipeline: Pipeline,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}, --cache {}, --pipeline {}",
            self.backend,
            self.cache.arg(),
            self.pipeline.arg()
        )
    }
}

impl Cell {
    pub(crate) fn new(backend: Backend, cache: Cache, pipeline: Pipeline) -> Self {
        Self {
            backend,
            cache,
            pipeline,
        }
    }

    /// The export spec for `name` of `size` (e.g. `16M`, `5000001`):
    /// memory, or a file `NAME.img` in `dir`.
    pub(crate) fn export_spec(&self, dir: &Path, name: &str, size: &str) -> String {
        match self.backend {
            Backend::Mem => format!("mem:{size}"),
            Backend::File => format!(
                "file:{},size={size}",
                dir.join(format!("{name}.img")).display()
            ),
        }
    }

    /// The server's cache and pipeline arguments.
    pub(crate) fn args(&self) -> [&'static str; 4] {
        [
            "--cache",
            self.cache.arg(),
            "--pipeline",
            self.pipeline.arg(),
        ]
    }

    /// A server in this configuration with `exports` (name, size) stored
    /// per the backend (files in `dir`).
    pub(crate) fn server(&self, dir: &Path, exports: &[(&str, &str)]) -> ServerBuilder {
        let mut b = ServerBuilder::new().cell(*self);
        for (name, size) in exports {
            b = b.export(name, self.export_spec(dir, name, size));
        }
        b
    }
}
