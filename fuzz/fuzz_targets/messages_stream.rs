#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandgate_fuzz::messages::messages_stream(data));
