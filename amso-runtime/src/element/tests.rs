//! The element table's facts against DLPack, NumPy and each Rust type.

use super::*;
use crate::error::Error;

#[test]
fn every_element_defaults_to_zero_bits_and_matches_its_size() {
    let mut count = 0;
    for_each_element(&mut |dtype, zero_default| {
        assert!(zero_default(), "{} default is not zero bits", dtype.name);
        assert!(dtype.itemsize() > 0);
        count += 1;
    });
    assert!(count >= 15, "expected the full dtype table, saw {count}");
}

#[test]
fn a_vector_is_not_one_scalar() {
    let error = <[f32; 4] as Element>::to_scalar([1.0, 2.0, 3.0, 4.0]).unwrap_err().to_string();
    assert!(error.contains("not one value but 4 lanes of float32") && error.contains("a.scalar_view()"), "{error}");
    assert!(<[f32; 4] as Element>::from_scalar(Scalar::Float(1.0)).is_err());
    let dtype = &<[f32; 4] as ArrayElement>::DTYPE;
    assert!(dtype.is_vector() && dtype.is_compound() && !dtype.is_record() && dtype.typestr == "<f4");
    assert!(
        !<f32 as ArrayElement>::DTYPE.is_vector()
            && !<crate::element::Float4E2M1FnX2 as ArrayElement>::DTYPE.is_vector()
    );
    // The typestr names the lane type: it finds float32, not the vector.
    assert_eq!(DType::from_typestr("<f4").map(|d| d.name), Some("float32"));
}

#[test]
fn dlpack_codes_match_dlpack_1_3() {
    assert_eq!(<i32 as ArrayElement>::DTYPE.code, 0);
    assert_eq!(<u8 as ArrayElement>::DTYPE.code, 1);
    assert_eq!(<f64 as ArrayElement>::DTYPE.code, 2);
    assert_eq!(<half::bf16 as ArrayElement>::DTYPE.code, 4);
    assert_eq!(<num_complex::Complex<f32> as ArrayElement>::DTYPE.code, 5);
    assert_eq!(<num_complex::Complex<f32> as ArrayElement>::DTYPE.bits, 64);
    assert_eq!(<bool as ArrayElement>::DTYPE.code, 6);
    assert_eq!(<f32 as ArrayElement>::DTYPE.typestr, "<f4");
    assert_eq!(<u8 as ArrayElement>::DTYPE.typestr, "|u1");
}

#[test]
fn scalar_round_trips_and_numpy_assignment_rules() {
    assert_eq!(i8::from_scalar(Scalar::Int(-128)), Ok(-128));
    assert!(matches!(i8::from_scalar(Scalar::Int(128)), Err(Error::ValueOutOfRange(_))));
    assert!(matches!(u8::from_scalar(Scalar::Int(-1)), Err(Error::ValueOutOfRange(_))));
    assert_eq!(u64::from_scalar(Scalar::UInt(u64::MAX)), Ok(u64::MAX));
    assert_eq!(i32::from_scalar(Scalar::Float(-2.7)), Ok(-2), "floats truncate toward zero");
    assert!(matches!(i32::from_scalar(Scalar::Float(f64::NAN)), Err(Error::ValueOutOfRange(_))));
    assert!(matches!(f32::from_scalar(Scalar::Complex(1.0, 1.0)), Err(Error::WrongValueType(_))));
    assert_eq!(half::f16::from_scalar(Scalar::Float(0.5)).unwrap().to_scalar(), Ok(Scalar::Float(0.5)));
    assert_eq!(half::bf16::from_scalar(Scalar::Int(3)).unwrap().to_scalar(), Ok(Scalar::Float(3.0)));
    assert_eq!(bool::from_scalar(Scalar::Float(0.1)), Ok(true));
    let c = num_complex::Complex::<f64>::from_scalar(Scalar::Complex(1.5, -2.0)).unwrap();
    assert_eq!(c.to_scalar(), Ok(Scalar::Complex(1.5, -2.0)));
    assert_eq!(f32::from_scalar(Scalar::Float(1e300)), Ok(f32::INFINITY), "overflow rounds to inf as NumPy");
}
