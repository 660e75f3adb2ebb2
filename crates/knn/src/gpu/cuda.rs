//! The CUDA driver and NVRTC, found at run time: a machine without them
//! builds and runs everything else, and asking it for the GPU gets
//! [`Error::Unavailable`] saying what is missing. The kernels
//! (`kernels.cu`) are compiled here for the device's own architecture, to
//! machine code rather than PTX, so that an NVRTC newer than the driver
//! still gives code the driver loads.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUdevice_attribute, CUresult};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DriverError};
use cudarc::nvrtc::Ptx;
use spillway_core::{Error, Result};

const SOURCE: &str = include_str!("kernels.cu");

/// A GPU with the kernels loaded.
#[derive(Debug)]
pub(crate) struct Cuda {
    /// The device's default stream (it holds the context).
    pub stream: Arc<CudaStream>,
    /// The device's name, for statistics and errors.
    pub name: String,
    pub multiprocessors: u32,
    pub kernels: Kernels,
}

/// The kernels of `kernels.cu`, by coordinate type where they read points,
/// PSB also by children per lane (1 or 4); `psb_lanes_*` keep the list in
/// registers (k <= 32).
#[derive(Debug)]
pub(crate) struct Kernels {
    pub psb_f32_1: CudaFunction,
    pub psb_f32_4: CudaFunction,
    pub psb_f64_1: CudaFunction,
    pub psb_f64_4: CudaFunction,
    pub psb_lanes_f32_1: CudaFunction,
    pub psb_lanes_f32_4: CudaFunction,
    pub psb_lanes_f64_1: CudaFunction,
    pub psb_lanes_f64_4: CudaFunction,
    pub brute_f32: CudaFunction,
    pub brute_f64: CudaFunction,
    pub merge: CudaFunction,
    pub finish: CudaFunction,
}

/// Whether the CUDA driver library and a GPU are present (cheap: no
/// context is made and nothing is compiled); else why not.
pub(crate) fn probe() -> Result<()> {
    loaded(|| {
        // SAFETY: only tries to open the library by its usual names.
        #[allow(unsafe_code)]
        let driver = unsafe { cudarc::driver::sys::is_culib_present() };
        if !driver {
            return Err(Error::Unavailable(
                "no CUDA driver here (libcuda.so.1 was not found): the GPU search needs an NVIDIA GPU and its \
                 driver; query on the CPU instead"
                    .into(),
            ));
        }
        let count = CudaContext::device_count().map_err(driver_error("counting the GPUs"))?;
        if count < 1 {
            return Err(Error::Unavailable("the CUDA driver found no GPU".into()));
        }
        Ok(())
    })
}

/// GPU 0 with the kernels loaded: opened, and the kernels compiled (some
/// seconds), by the first call of the process; later calls share it.
pub(crate) fn open() -> Result<Arc<Cuda>> {
    static OPENED: Mutex<Option<Arc<Cuda>>> = Mutex::new(None);
    let mut opened = OPENED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(cuda) = opened.as_ref() {
        return Ok(Arc::clone(cuda));
    }
    let cuda = Arc::new(open_now()?);
    *opened = Some(Arc::clone(&cuda));
    Ok(cuda)
}

fn open_now() -> Result<Cuda> {
    probe()?;
    loaded(|| {
        // SAFETY: as in `probe`.
        #[allow(unsafe_code)]
        let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
        if !nvrtc {
            return Err(Error::Unavailable(
                "NVRTC (libnvrtc.so) was not found: the GPU kernels are compiled when first used; install the CUDA \
                 toolkit, or `pip install nvidia-cuda-nvrtc`, and put the directory holding libnvrtc.so on \
                 LD_LIBRARY_PATH"
                    .into(),
            ));
        }
        let context = CudaContext::new(0).map_err(driver_error("opening GPU 0"))?;
        // One stream, in order: the searches need no events between their
        // launches and copies.
        // SAFETY: nothing of this context is in use yet.
        #[allow(unsafe_code)]
        unsafe {
            context.disable_event_tracking()
        };
        let name = context.name().map_err(driver_error("reading the GPU's name"))?;
        let (major, minor) = context
            .compute_capability()
            .map_err(driver_error("reading the GPU's compute capability"))?;
        let multiprocessors = context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver_error("reading the GPU's multiprocessor count"))?;
        keep_freed_memory(&context)?;
        let cubin = compile(major, minor)?;
        let module = context
            .load_module(Ptx::from_binary(cubin))
            .map_err(driver_error("loading the compiled kernels"))?;
        let function = |name: &str| {
            module
                .load_function(name)
                .map_err(driver_error("finding a kernel in the compiled module"))
        };
        let kernels = Kernels {
            psb_f32_1: function("psb_f32_1")?,
            psb_f32_4: function("psb_f32_4")?,
            psb_f64_1: function("psb_f64_1")?,
            psb_f64_4: function("psb_f64_4")?,
            psb_lanes_f32_1: function("psb_lanes_f32_1")?,
            psb_lanes_f32_4: function("psb_lanes_f32_4")?,
            psb_lanes_f64_1: function("psb_lanes_f64_1")?,
            psb_lanes_f64_4: function("psb_lanes_f64_4")?,
            brute_f32: function("brute_f32")?,
            brute_f64: function("brute_f64")?,
            merge: function("merge")?,
            finish: function("finish")?,
        };
        let stream = context.default_stream();
        Ok(Cuda {
            stream,
            name,
            multiprocessors: multiprocessors.max(1) as u32,
            kernels,
        })
    })
}

/// Makes the device's default memory pool keep what is freed: a batch's
/// buffers (allocated on the stream, freed after it) are then reused by the
/// next batch instead of being given back to the driver at every
/// synchronisation and mapped again, which costs more than a small batch.
fn keep_freed_memory(context: &CudaContext) -> Result<()> {
    use cudarc::driver::sys;
    let error = driver_error("setting up the GPU's memory pool");
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: `pool` receives the device's default pool, which lives as
    // long as the device; the attribute takes a u64.
    #[allow(unsafe_code)]
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, context.cu_device())
            .result()
            .map_err(&error)?;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .result()
        .map_err(&error)
    }
}

/// `kernels.cu` compiled to machine code for compute capability
/// `major.minor`, fused multiply-adds off (the canonical distance).
fn compile(major: i32, minor: i32) -> Result<Vec<u8>> {
    use cudarc::nvrtc::result;
    use std::ffi::CString;
    let source = CString::new(SOURCE).expect("kernels.cu has no NUL byte");
    let program = result::create_program(&source, None)
        .map_err(|error| Error::Unavailable(format!("NVRTC could not start a program: {error:?}")))?;
    let options = [
        format!("--gpu-architecture=sm_{major}{minor}"),
        "--fmad=false".to_string(),
        "--std=c++17".to_string(),
    ];
    // SAFETY: `program` is live until destroyed below; the options are
    // valid C strings.
    #[allow(unsafe_code)]
    let compiled = unsafe { result::compile_program(program, &options) };
    #[allow(unsafe_code)]
    let outcome = match compiled {
        Err(error) => {
            // SAFETY: as above.
            let log = unsafe { result::get_program_log(program) }
                .map(|log| log.iter().map(|&c| c as u8 as char).collect::<String>())
                .unwrap_or_default();
            Err(Error::Internal(format!(
                "NVRTC could not compile the kernels for sm_{major}{minor} ({error:?}): {}",
                log.trim_end_matches('\0').trim()
            )))
        }
        // SAFETY: the program compiled; the buffer is sized by NVRTC.
        Ok(()) => unsafe {
            let mut size = 0usize;
            let sized = cudarc::nvrtc::sys::nvrtcGetCUBINSize(program, &mut size);
            let mut cubin = vec![0u8; size];
            let got = cudarc::nvrtc::sys::nvrtcGetCUBIN(program, cubin.as_mut_ptr().cast());
            match (sized.result(), got.result()) {
                (Ok(()), Ok(())) if size > 0 => Ok(cubin),
                other => Err(Error::Unavailable(format!(
                    "NVRTC compiled the kernels but gave no machine code for sm_{major}{minor}: {other:?}"
                ))),
            }
        },
    };
    // SAFETY: created above, destroyed once.
    #[allow(unsafe_code)]
    let _ = unsafe { result::destroy_program(program) };
    outcome
}

/// Runs `f`, turning a panic of the library loader (a library found but
/// lacking a function this build expects: a driver older than CUDA 13)
/// into an error.
fn loaded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(Error::Unavailable(format!(
            "the CUDA libraries found here could not be used (a CUDA 13 driver is needed): {what}"
        )))
    })
}

/// A driver error while doing `what`, by kind: memory is a resource, a
/// missing or unusable device is unavailability, anything else a bug here.
pub(crate) fn driver_error(what: &'static str) -> impl Fn(DriverError) -> Error {
    move |error| match error.0 {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
            Error::ResourcesExhausted(format!("GPU memory ran out while {what}"))
        }
        CUresult::CUDA_ERROR_NO_DEVICE
        | CUresult::CUDA_ERROR_INVALID_DEVICE
        | CUresult::CUDA_ERROR_NOT_INITIALIZED
        | CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
        | CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => {
            Error::Unavailable(format!("the GPU cannot be used ({:?}) while {what}", error.0))
        }
        other => Error::Internal(format!("CUDA error {other:?} while {what}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVRTC needs no GPU: where it is found (the CUDA toolkit, or the
    /// `nvidia-cuda-nvrtc` wheel on LD_LIBRARY_PATH), the kernels must
    /// compile for a Hopper GPU with the options the search uses.
    #[test]
    fn the_kernels_compile_wherever_nvrtc_is_found() {
        #[allow(unsafe_code)]
        // SAFETY: as in `open_now`.
        let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
        if !present {
            eprintln!("NVRTC not found: the kernels' compilation is not checked here");
            return;
        }
        let cubin = compile(9, 0).unwrap();
        assert!(
            cubin.len() > 1024 && cubin.starts_with(b"\x7fELF"),
            "{} bytes",
            cubin.len()
        );
    }
}
