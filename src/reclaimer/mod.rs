//! `ReclaimerActor`: one per (stream, group).
