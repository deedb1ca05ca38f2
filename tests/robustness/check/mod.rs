//! The checkers: each judges one property of a recorded [`History`](super::history::History).
