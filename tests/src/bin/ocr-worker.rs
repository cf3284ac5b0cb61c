//! `tether-ocr-worker`: the OCR worker process without the `tether` binary, so the tests
//! crate's integration tests and the bench can start one (`harness::test_ocr_worker`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    tether::device::ocr::worker_main::run(&args)
}
