//! [`StripedClient`] spreads one named object over several object
//! servers, its layout kept by a metadata service (`sluice-meta`): each
//! operation is split by stripe ([`StripePlan`], `plan.rs`) into one
//! request per server, the servers driven in parallel over a pool of
//! connections (`pool.rs`); a put writes a new object's pieces before its
//! entry is ready (`put.rs`), and [`StripedClient::fsck`] (`fsck.rs`)
//! repairs what a crash between its metadata and data steps leaves.

mod client;
mod create;
mod erasure;
mod fsck;
pub mod plan;
mod pool;
mod put;
mod replicas;

pub use client::{
    CreateStep, RemoveStep, StripedClient, StripedError, StripedObject, StripedRead, StripedWrite,
    PIECE_COLLECTION, PIECE_DEPLOYMENT_ATTR, PIECE_INDEX_ATTR, PIECE_OF_ATTR, PIECE_PUT_ATTR,
};
pub use create::Shape;
pub use fsck::{FsckOptions, FsckReport, Orphan};
pub use plan::{ColumnPlan, Pattern, PlanError, Run, StripePlan};
pub use put::PutStep;
