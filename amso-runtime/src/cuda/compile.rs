//! NVRTC: CUDA C++ to a CUBIN for a device's exact architecture, with amso's header available
//! as `#include "amso.cuh"`, loaded as a cudarc module and cached per (source, name, options,
//! device) for the life of the process.
//!
//! Raw NVRTC calls: cudarc's `compile_ptx` returns PTX only, and a CUBIN for the exact
//! architecture loads without a JIT step. NVRTC is found by cudarc's dynamic loading:
//! `libnvrtc.so`, then `libnvrtc.so.13`, then `libnvrtc.so.12` (CUDA 13 or 12), from the
//! loader's path (`LD_LIBRARY_PATH`, then the system's).

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaFunction;
use cudarc::nvrtc::{sys as nvrtc, Ptx};

use super::context::{context, Current};
use super::driver::cuda_error;
use crate::device::DeviceId;
use crate::error::{Error, Result};

/// The text of generated/amso.cuh (written by the build script from the same spec).
pub(crate) const AMSO_CUH: &str = include_str!(concat!(env!("OUT_DIR"), "/amso.cuh"));

type Key = (String, String, Vec<String>, DeviceId);

static CACHE: Mutex<Option<HashMap<Key, Arc<CudaFunction>>>> = Mutex::new(None);

fn nvrtc_available() -> Result<()> {
    // SAFETY: only probes whether libnvrtc can be opened; catch_unwind guards cudarc panics.
    let present = std::panic::catch_unwind(|| unsafe { nvrtc::is_culib_present() }).unwrap_or(false);
    if present {
        Ok(())
    } else {
        Err(Error::Unavailable(
            "NVRTC was not found (libnvrtc.so, .so.13 or .so.12); amso compiles CUDA kernels with it at run time: \
             install the CUDA runtime compiler (e.g. pip install nvidia-cuda-nvrtc-cu12) or add it to LD_LIBRARY_PATH"
                .into(),
        ))
    }
}

/// The CUDA toolkit's include folder, if one is installed (for `<cuda_fp16.h>` in amso.cuh).
fn toolkit_include() -> Option<String> {
    let roots = ["CUDA_HOME", "CUDA_PATH"].into_iter().filter_map(|v| std::env::var(v).ok());
    roots
        .chain(["/usr/local/cuda".to_string()])
        .map(|root| format!("{root}/include"))
        .find(|include| std::path::Path::new(include).join("cuda_fp16.h").exists())
}

/// `name` of `source`, compiled for `device_id` with `options` (cached).
pub(crate) fn function(source: &str, name: &str, options: &[String], device_id: DeviceId) -> Result<Arc<CudaFunction>> {
    let key: Key = (source.to_owned(), name.to_owned(), options.to_vec(), device_id);
    if let Some(found) = CACHE.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(Arc::clone(found));
    }
    // NVRTC and the module load take milliseconds to seconds: with the GIL released.
    crate::gil::released(|| -> Result<Arc<CudaFunction>> {
        let cubin = compile(source, name, options, device_id)?;
        let _ctx = Current::enter(device_id)?;
        // A first launch may come inside a CUDA graph capture: loading a module there is
        // allowed in the relaxed capture mode (it touches no stream).
        let _relaxed = super::capture::Relaxed::enter();
        let module =
            context(device_id)?.load_module(Ptx::from_binary(cubin)).map_err(cuda_error("cuModuleLoadData"))?;
        let compiled = Arc::new(module.load_function(name).map_err(|e| {
            Error::InvalidArgument(format!(
                "the compiled source has no kernel named `{name}` ({})",
                super::driver::describe(&e)
            ))
        })?);
        // A thread that compiled the same key meanwhile won: use its function. Ours, and the
        // module it holds, go at the end of this closure: unloaded with the GIL released and
        // the cache unlocked.
        let winner = Arc::clone(
            CACHE
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(HashMap::new)
                .entry(key)
                .or_insert_with(|| Arc::clone(&compiled)),
        );
        drop(compiled);
        Ok(winner)
    })
}

/// Compile `source` for the device's exact architecture and return the CUBIN.
fn compile(source: &str, name: &str, options: &[String], device_id: DeviceId) -> Result<Vec<u8>> {
    nvrtc_available()?;
    let (major, minor) = context(device_id)?.compute_capability().map_err(cuda_error("cuDeviceGetAttribute"))?;
    let text = |s: &str, what: &str| {
        CString::new(s).map_err(|_| Error::InvalidArgument(format!("the kernel's {what} contains a NUL byte")))
    };
    let source = text(source, "source")?;
    let header = text(AMSO_CUH, "header")?;
    let mut arguments = vec![format!("--gpu-architecture=sm_{major}{minor}"), "--std=c++17".to_string()];
    arguments.extend(toolkit_include().map(|include| format!("--include-path={include}")));
    arguments.extend(options.iter().cloned());
    let arguments = arguments.iter().map(|a| text(a, "options")).collect::<Result<Vec<_>>>()?;
    let argument_pointers: Vec<*const c_char> = arguments.iter().map(|a| a.as_ptr()).collect();
    let check = |code: nvrtc::nvrtcResult, call: &'static str| {
        if code == nvrtc::nvrtcResult::NVRTC_SUCCESS {
            Ok(())
        } else {
            // NVRTC's codes are not the driver's (`code` is the driver's `CUresult` only).
            Err(Error::Cuda { call, code: None, message: format!("NVRTC: {code:?}") })
        }
    };
    let mut program: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NUL-terminated source, header and names that outlive the program, which is
    // destroyed below on every path.
    unsafe {
        check(
            nvrtc::nvrtcCreateProgram(
                &mut program,
                source.as_ptr(),
                c"amso_kernel.cu".as_ptr(),
                1,
                [header.as_ptr()].as_ptr(),
                [c"amso.cuh".as_ptr()].as_ptr(),
            ),
            "nvrtcCreateProgram",
        )?;
        let compiled = nvrtc::nvrtcCompileProgram(program, argument_pointers.len() as i32, argument_pointers.as_ptr());
        let result = if compiled == nvrtc::nvrtcResult::NVRTC_SUCCESS {
            let mut size = 0usize;
            check(nvrtc::nvrtcGetCUBINSize(program, &mut size), "nvrtcGetCUBINSize").and_then(|_| {
                let mut cubin = vec![0u8; size];
                check(nvrtc::nvrtcGetCUBIN(program, cubin.as_mut_ptr().cast()), "nvrtcGetCUBIN").map(|_| cubin)
            })
        } else {
            let mut size = 0usize;
            let _ = nvrtc::nvrtcGetProgramLogSize(program, &mut size);
            let mut log = vec![0u8; size.max(1)];
            let _ = nvrtc::nvrtcGetProgramLog(program, log.as_mut_ptr().cast());
            Err(Error::Compile {
                kernel: name.to_owned(),
                arch: format!("sm_{major}{minor}"),
                status: format!("{compiled:?}"),
                log: String::from_utf8_lossy(&log).trim_end_matches('\0').trim_end().to_owned(),
            })
        };
        let _ = nvrtc::nvrtcDestroyProgram(&mut program);
        result
    }
}
