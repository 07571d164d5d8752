//! libFuzzer's input as a webhook body (`sandgate_conversation_fuzz::webhook`).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandgate_conversation_fuzz::webhook::webhook_body(data));
