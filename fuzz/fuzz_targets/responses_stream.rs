#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandgate_fuzz::responses::responses_stream(data));
