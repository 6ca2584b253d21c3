//! Shared-array handles (`amso.cuda.SharedHandle.from_bytes`) from arbitrary bytes: a handle
//! arrives from another process, through a pickle or a pipe. Decoding must refuse what is not
//! exactly one handle with an error, never a panic; what it accepts must encode back to the same
//! bytes (one encoding per handle), and name a folder of the form the lease protocol opens.
#![no_main]

use amso_runtime::__private::shared_handle_round_trip;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((encoded, folder)) = shared_handle_round_trip(data) {
        assert_eq!(encoded, data, "an accepted handle must encode back to its bytes");
        let rest = folder.strip_prefix("amso-shared-").expect("the folder prefix");
        let (uid, token) = rest.split_once('-').expect("uid-token");
        assert!(uid.parse::<u32>().is_ok(), "uid {uid}");
        assert!(token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()), "token {token}");
    }
});
