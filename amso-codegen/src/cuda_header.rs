//! `generated/amso.cuh`: what a CUDA kernel over amso arrays includes. The element types of
//! the spec's table under their spec names (`amso::float16` is `__half`, `amso::complex64` a
//! pair of floats), and `amso::Indexer<T, N>`, the by-value kernel argument whose layout equals
//! the Rust `DeviceIndexer<T, N>` (asserted on both sides). The runtime embeds the same text
//! and hands it to NVRTC, so `#include "amso.cuh"` works with no options.

use std::fmt::Write as _;

use crate::{DType, Spec, TypeCode};

/// The CUDA type of one element type, from its DLPack facts.
fn cuda_type(dtype: &DType) -> String {
    match (dtype.code, dtype.bits, dtype.lanes) {
        (TypeCode::Float, 16, 1) => "AMSO_HALF".into(),
        (TypeCode::Bfloat, 16, 1) => "AMSO_BFLOAT16".into(),
        (TypeCode::Complex, 64, 1) => "complex64_t".into(),
        (TypeCode::Complex, 128, 1) => "complex128_t".into(),
        (TypeCode::Bool, 8, 1) => "bool".into(),
        (TypeCode::Int, bits, 1) => format!("int{bits}_t"),
        (TypeCode::UInt, bits, 1) => format!("uint{bits}_t"),
        (TypeCode::Float, 32, 1) => "float".into(),
        (TypeCode::Float, 64, 1) => "double".into(),
        // CUDA's own low-precision types where its headers have them (one byte each, as amso
        // stores them: __nv_fp4x2_e2m1 holds two packed values).
        (TypeCode::Float8E4M3Fn, 8, 1) => "AMSO_FP8_E4M3".into(),
        (TypeCode::Float8E5M2, 8, 1) => "AMSO_FP8_E5M2".into(),
        (TypeCode::Float6E2M3Fn, 6, 1) => "AMSO_FP6_E2M3".into(),
        (TypeCode::Float6E3M2Fn, 6, 1) => "AMSO_FP6_E3M2".into(),
        (TypeCode::Float4E2M1Fn, 4, 1) => "AMSO_FP4_E2M1".into(),
        (TypeCode::Float4E2M1Fn, 4, 2) => "AMSO_FP4X2_E2M1".into(),
        // CUDA's own vectors (aligned to their size), which the spec's vector dtypes are.
        (TypeCode::Float, 32, lanes @ (2 | 4)) => format!("float{lanes}"),
        (TypeCode::Int, 32, lanes @ (2 | 4)) => format!("int{lanes}"),
        (TypeCode::UInt, 32, lanes @ (2 | 4)) => format!("uint{lanes}"),
        _ => format!("struct {{ unsigned char bytes[{}]; }}", dtype.itemsize()),
    }
}

/// The header's text.
pub fn cuda_header(spec: &Spec) -> String {
    let mut types = String::new();
    for dtype in spec.dtypes.iter().filter(|d| cuda_type(d) != d.name) {
        let _ = writeln!(types, "typedef {} {};", cuda_type(dtype), dtype.name);
    }
    let mut records = String::new();
    let mut aliases = String::new();
    for record in &spec.records {
        records.push_str(&cuda_record(spec, record));
        let _ = write!(
            aliases,
            "\n// A kernel's argument over an array of {name} records: `p(i).{field}`.\n\
             template <int Rank>\nusing {name}_indexer = Indexer<{name}, Rank>;\n",
            name = record.name,
            field = record.fields[0].name,
        );
    }
    let indexer = if aliases.is_empty() {
        INDEXER.to_string()
    } else {
        INDEXER.replace("\n}  // namespace amso\n", &format!("{aliases}\n}}  // namespace amso\n"))
    };
    let prelude = PRELUDE.replace("{note}", crate::HEADER_NOTE).replace("{vectors}", &host_vectors(spec));
    format!("{prelude}{types}{records}{indexer}")
}

/// One record as a struct of the spec's CUDA types, `amso::NAME`, with the generator's size and
/// alignment asserted (and each offset, where `<cstddef>` is there: not under NVRTC). Its name
/// differs from amso.h's `amso_NAME_t`, so a file may include both headers.
fn cuda_record(spec: &Spec, record: &crate::Record) -> String {
    let name = &record.name;
    let mut out = format!(
        "\n// Record {name}: {} bytes, aligned to {}, C's {} (generated/amso.h).\nstruct {name} {{\n",
        record.size,
        record.align,
        record.c_type()
    );
    out += &record.members(spec, |dtype| &dtype.name);
    let _ = writeln!(
        out,
        "}};\nstatic_assert(sizeof({name}) == {} && alignof({name}) == {}, \"amso::{name} layout\");",
        record.size, record.align
    );
    out.push_str("#if !defined(__CUDACC_RTC__)\n");
    for field in &record.fields {
        let _ = writeln!(
            out,
            "static_assert(offsetof({name}, {field}) == {offset}, \"amso::{name}.{field} is at {offset}\");",
            field = field.name,
            offset = field.offset
        );
    }
    out.push_str("#endif\n");
    out
}

/// Host definitions of CUDA's vector types the spec uses, for a host compiler reading the header
/// (nvcc and NVRTC define them).
fn host_vectors(spec: &Spec) -> String {
    let mut out = String::new();
    for dtype in spec.dtypes.iter().filter(|d| d.is_vector()) {
        let lane = match dtype.code {
            TypeCode::Float => "float",
            TypeCode::Int => "int",
            _ => "unsigned int",
        };
        let members = ["x", "y", "z", "w"][..usize::from(dtype.lanes).min(4)].join(", ");
        let _ = writeln!(
            out,
            "struct alignas({}) {} {{ {lane} {members}; }};",
            crate::record::alignment(dtype),
            cuda_type(dtype)
        );
    }
    if out.is_empty() {
        return out;
    }
    format!("#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)\n{out}#endif\n")
}

const PRELUDE: &str = r#"// {note}
// amso's CUDA header: the spec's element types and amso::Indexer<T, N>, the by-value kernel
// argument for an amso array (or any C-contiguous CUDA array amso passes to a kernel).
#pragma once

#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stddef.h>
#include <stdint.h>
#endif
{vectors}
// Half types come from CUDA's headers where the compiler finds them (amso adds the toolkit's
// include folder for NVRTC when it exists); otherwise a 16-bit storage type of the same layout.
#if defined(__has_include)
#if __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define AMSO_HALF __half
#define AMSO_BFLOAT16 __nv_bfloat16
#endif
#endif
// CUDA's float8 (cuda_fp8.h), float6 and float4 (cuda_fp6.h, cuda_fp4.h: CUDA 12.8 and later)
// likewise; otherwise one-byte storage types, which kernels convert by hand.
#if defined(__has_include)
#if __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#define AMSO_FP8_E4M3 __nv_fp8_e4m3
#define AMSO_FP8_E5M2 __nv_fp8_e5m2
#endif
#if __has_include(<cuda_fp6.h>) && __has_include(<cuda_fp4.h>)
#include <cuda_fp6.h>
#include <cuda_fp4.h>
#define AMSO_FP6_E2M3 __nv_fp6_e2m3
#define AMSO_FP6_E3M2 __nv_fp6_e3m2
#define AMSO_FP4_E2M1 __nv_fp4_e2m1
#define AMSO_FP4X2_E2M1 __nv_fp4x2_e2m1
#endif
#endif
#ifndef AMSO_FP8_E4M3
struct amso_fp8_e4m3_bits { unsigned char bits; };
struct amso_fp8_e5m2_bits { unsigned char bits; };
#define AMSO_FP8_E4M3 amso_fp8_e4m3_bits
#define AMSO_FP8_E5M2 amso_fp8_e5m2_bits
#endif
#ifndef AMSO_FP4_E2M1
struct amso_fp6_e2m3_bits { unsigned char bits; };
struct amso_fp6_e3m2_bits { unsigned char bits; };
struct amso_fp4_e2m1_bits { unsigned char bits; };
struct amso_fp4x2_e2m1_bits { unsigned char bits; };
#define AMSO_FP6_E2M3 amso_fp6_e2m3_bits
#define AMSO_FP6_E3M2 amso_fp6_e3m2_bits
#define AMSO_FP4_E2M1 amso_fp4_e2m1_bits
#define AMSO_FP4X2_E2M1 amso_fp4x2_e2m1_bits
#endif
#ifndef AMSO_HALF
struct amso_half_bits { unsigned short bits; };
struct amso_bfloat16_bits { unsigned short bits; };
#define AMSO_HALF amso_half_bits
#define AMSO_BFLOAT16 amso_bfloat16_bits
#endif

namespace amso {

struct complex64_t { float re, im; };
struct complex128_t { double re, im; };

// The element types of specs/types.yaml, by their spec names (bool is C++'s own).
"#;

const INDEXER: &str = r#"
// A C-order array: its data pointer and shape, passed to a kernel by value. (Parameter names
// are long so that a kernel's own -DN=... or -DT=... macros cannot rewrite them.)
template <class Element, int Rank>
struct Indexer {
    static_assert(Rank >= 1 && Rank <= 8, "amso arrays have 1 to 8 dimensions");
    Element *data;
    uint64_t shape[Rank];

    // Number of elements.
    __host__ __device__ uint64_t size() const {
        uint64_t count = 1;
        for (int d = 0; d < Rank; ++d) count *= shape[d];
        return count;
    }

    // Linear offset of an index (no bounds check).
    template <class... I>
    __host__ __device__ uint64_t offset(I... index) const {
        static_assert(sizeof...(I) == Rank, "an Indexer<T, N> takes N indices");
        const uint64_t at[Rank] = {static_cast<uint64_t>(index)...};
        uint64_t linear = 0;
        for (int d = 0; d < Rank; ++d) linear = linear * shape[d] + at[d];
        return linear;
    }

    // The element at an index (no bounds check).
    template <class... I>
    __device__ Element &operator()(I... index) const { return data[offset(index...)]; }

    // The index of linear offset `linear`, into `index[N]`.
    __host__ __device__ void unravel(uint64_t linear, uint64_t *index) const {
        for (int d = Rank - 1; d >= 0; --d) {
            index[d] = linear % shape[d];
            linear /= shape[d];
        }
    }
};

// The layout of the Rust DeviceIndexer<T, N>: a pointer, then N 64-bit dimensions, no padding
// (with 8-byte members, these sizes fix the shape's offset at 8).
static_assert(sizeof(Indexer<double, 3>) == 32, "amso::Indexer layout");
static_assert(sizeof(Indexer<uint8_t, 1>) == 16, "amso::Indexer layout");
static_assert(sizeof(Indexer<complex128_t, 8>) == 72, "amso::Indexer layout");

}  // namespace amso
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_has_its_cuda_type_and_the_header_compiles_as_host_cpp() {
        let spec = crate::bundled_spec().unwrap();
        let header = cuda_header(&spec);
        assert!(header.contains("typedef float float32;") && header.contains("typedef AMSO_HALF float16;"));
        assert!(!header.contains("typedef bool bool"));
        // The same text through the host's C++ compiler (CUDA's qualifiers defined away): the
        // syntax and the layout asserts hold on a 64-bit host as on the device.
        let Some(compiler) = ["c++", "g++", "clang++"]
            .into_iter()
            .find(|c| std::process::Command::new(c).arg("--version").output().is_ok())
        else {
            eprintln!("skipped: no C++ compiler");
            return;
        };
        let dir = std::env::temp_dir().join(format!("amso-cuh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("amso.cuh"), &header).unwrap();
        std::fs::write(
            dir.join("use.cpp"),
            "#include \"amso.cuh\"\nint main() { double d[6] = {0}; amso::Indexer<double, 2> a{d, {2, 3}};\n             uint64_t i[2]; a.unravel(5, i); return int(a.size() + a.offset(1, 2) + i[0] + i[1]) == 6 + 5 + 1 + 2 ? 0 : 1; }\n",
        )
        .unwrap();
        let status = std::process::Command::new(compiler)
            .args(["-std=c++17", "-D__host__=", "-D__device__=", "-o"])
            .arg(dir.join("use"))
            .arg(dir.join("use.cpp"))
            .status()
            .unwrap();
        assert!(status.success(), "the generated header does not compile as C++");
        assert!(std::process::Command::new(dir.join("use")).status().unwrap().success(), "Indexer arithmetic");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod record_tests {
    use super::*;

    /// A spec with a padded record and CUDA vectors, beside the bundled one.
    pub(crate) const RECORDS_SPEC: &str = "dtypes:
  - {name: int8, rust: i8, code: kDLInt, bits: 8, lanes: 1, numpy: int8, c: int8_t}
  - {name: float32, rust: f32, code: kDLFloat, bits: 32, lanes: 1, numpy: float32, c: float}
  - {name: float64, rust: f64, code: kDLFloat, bits: 64, lanes: 1, numpy: float64, c: double}
  - {name: complex64, rust: \"num_complex::Complex<f32>\", code: kDLComplex, bits: 64, lanes: 1, numpy: complex64, c: amso_complex64_t}
  - {name: float32x4, rust: \"[f32; 4]\", code: kDLFloat, bits: 32, lanes: 4, numpy: float32, c: amso_float32x4_t}
  - {name: int32x2, rust: \"[i32; 2]\", code: kDLInt, bits: 32, lanes: 2, numpy: int32, c: amso_int32x2_t}
  - {name: uint32x4, rust: \"[u32; 4]\", code: kDLUInt, bits: 32, lanes: 4, numpy: uint32, c: amso_uint32x4_t}
instantiations: []
records:
  - {name: padded, fields: [{name: a, dtype: int8}, {name: b, dtype: float64}]}
  - {name: grid, fields: [{name: a, dtype: int8}, {name: m, dtype: float32, shape: [2, 3]}, {name: z, dtype: complex64}, {name: c, dtype: int8, shape: [3]}]}
";

    /// Compile `source` (and run it) with the first of `compilers` found, in a folder holding
    /// both headers of `spec`; `None` when there is no compiler.
    pub(crate) fn compile_and_run(
        spec: &Spec,
        compilers: &[&str],
        args: &[&str],
        file: &str,
        source: &str,
    ) -> Option<()> {
        let compiler = compilers.iter().find(|c| std::process::Command::new(c).arg("--version").output().is_ok())?;
        let dir = std::env::temp_dir().join(format!("amso-records-{}-{file}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("amso.h"), crate::c_header::c_header(spec)).unwrap();
        std::fs::write(dir.join("amso.cuh"), cuda_header(spec)).unwrap();
        std::fs::write(dir.join(file), source).unwrap();
        let status = std::process::Command::new(compiler)
            .args(args)
            .args(["-Wall", "-Werror", "-o"])
            .arg(dir.join("run"))
            .arg(dir.join(file))
            .status()
            .unwrap();
        assert!(status.success(), "{file} does not compile against the headers");
        let run = std::process::Command::new(dir.join("run")).output().unwrap();
        assert!(run.status.success(), "{file}: {}", String::from_utf8_lossy(&run.stdout));
        let _ = std::fs::remove_dir_all(&dir);
        Some(())
    }

    /// `check(offsetof(T, f) == N)` lines for every field, size and alignment of every record.
    pub(crate) fn layout_checks(spec: &Spec, prefix: &str, suffix: &str, alignof: &str) -> String {
        let mut out = String::new();
        for record in &spec.records {
            let ty = format!("{prefix}{}{suffix}", record.name);
            for field in &record.fields {
                let _ = writeln!(
                    out,
                    "    check(offsetof({ty}, {}) == {}, \"{ty}.{}\");",
                    field.name, field.offset, field.name
                );
            }
            let _ = writeln!(
                out,
                "    check(sizeof({ty}) == {} && {alignof}({ty}) == {}, \"{ty}\");",
                record.size, record.align
            );
        }
        out
    }

    #[test]
    fn a_cpp_file_includes_both_headers_and_indexes_records_in_a_kernel_style() {
        let bundled = crate::bundled_spec().unwrap();
        let tests = Spec::parse(RECORDS_SPEC, "t.yaml").unwrap();
        assert!(
            cuda_header(&tests).contains("typedef float4 float32x4;")
                && cuda_header(&tests).contains("typedef int2 int32x2;")
        );
        for spec in [&bundled, &tests] {
            let mut source = String::from(
                "#include \"amso.h\"\n#include \"amso.cuh\"\n#include <cstdio>\n#include <cstddef>\n\
                 static int failed = 0;\nstatic void check(bool ok, const char *what) { if (!ok) { std::printf(\"%s\\n\", what); failed = 1; } }\n\
                 int main() {\n",
            );
            source += &layout_checks(spec, "amso::", "", "alignof");
            source += &layout_checks(spec, "amso_", "_t", "alignof");
            if spec.record("particle").is_some() {
                source += "    amso::particle particles[2] = {};\n    amso::particle_indexer<1> p{particles, {2}};\n\
                           p(1).pos[0] = 2.5f; p(1).id = 7;\n    check(particles[1].pos[0] == 2.5f && particles[1].id == 7, \"p(i).pos[0]\");\n";
            }
            source += "    return failed;\n}\n";
            let args = ["-std=c++17", "-D__host__=", "-D__device__="];
            if compile_and_run(spec, &["c++", "g++", "clang++"], &args, "both.cpp", &source).is_none() {
                eprintln!("skipped: no C++ compiler");
                return;
            }
        }
    }

    #[test]
    fn a_c_program_reads_each_record_offset_the_generator_computed() {
        let bundled = crate::bundled_spec().unwrap();
        let tests = Spec::parse(RECORDS_SPEC, "t.yaml").unwrap();
        for spec in [&bundled, &tests] {
            let mut source = String::from(
                "#include \"amso.h\"\n#include <stdio.h>\n#include <stddef.h>\n\
                 static int failed = 0;\nstatic void check(bool ok, const char *what) { if (!ok) { printf(\"%s\\n\", what); failed = 1; } }\n\
                 int main(void) {\n",
            );
            source += &layout_checks(spec, "amso_", "_t", "_Alignof");
            for vector in spec.dtypes.iter().filter(|d| d.is_vector()) {
                let _ = writeln!(
                    source,
                    "    check(sizeof({c}) == {} && _Alignof({c}) == {}, \"{c}\");",
                    vector.itemsize(),
                    crate::record::alignment(vector),
                    c = vector.c
                );
            }
            source += "    return failed;\n}\n";
            if compile_and_run(spec, &["cc", "gcc", "clang"], &["-std=c11", "-pedantic"], "records.c", &source)
                .is_none()
            {
                eprintln!("skipped: no C compiler");
                return;
            }
        }
    }
}
