//! What a build and a query take.

use std::str::FromStr;

use serde::Serialize;
use spillway_core::{ensure, Error, Result};

/// How the leaves and the upper levels are grouped, bottom-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Build {
    /// Points clustered by k-means (Lloyd's algorithm), each cluster cut
    /// into full leaves; upper levels clustered the same way (the seed's
    /// better construction: fewer nodes visited per query).
    KMeans,
    /// Points sorted by their Hilbert key and packed into full leaves,
    /// upper levels packed in the same order.
    Hilbert,
}

impl FromStr for Build {
    type Err = Error;
    fn from_str(name: &str) -> Result<Build> {
        match name {
            "kmeans" => Ok(Build::KMeans),
            "hilbert" => Ok(Build::Hilbert),
            _ => Err(Error::InvalidArgument(format!(
                "unknown build {name:?}: expected kmeans or hilbert"
            ))),
        }
    }
}

impl Build {
    /// The name `FromStr` accepts.
    pub fn name(self) -> &'static str {
        match self {
            Build::KMeans => "kmeans",
            Build::Hilbert => "hilbert",
        }
    }
}

/// The search a query runs; every method gives the same answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Chosen per batch (see DESIGN.md, "Choosing a method").
    Auto,
    /// Parallel Scan and Backtrack: leaves scanned left to right in
    /// depth-first order, no stack.
    Psb,
    /// Best-first: the open node of smallest lower bound next (a heap).
    #[serde(rename = "bnb")]
    BranchAndBound,
    /// Every point, in blocks.
    #[serde(rename = "brute")]
    BruteForce,
}

impl FromStr for Method {
    type Err = Error;
    fn from_str(name: &str) -> Result<Method> {
        match name {
            "auto" => Ok(Method::Auto),
            "psb" => Ok(Method::Psb),
            "bnb" => Ok(Method::BranchAndBound),
            "brute" => Ok(Method::BruteForce),
            _ => Err(Error::InvalidArgument(format!(
                "unknown method {name:?}: expected auto, psb, bnb or brute"
            ))),
        }
    }
}

impl Method {
    /// The name `FromStr` accepts.
    pub fn name(self) -> &'static str {
        match self {
            Method::Auto => "auto",
            Method::Psb => "psb",
            Method::BranchAndBound => "bnb",
            Method::BruteForce => "brute",
        }
    }
}

/// Where a batch of queries runs; every device gives the same answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// This machine's cores.
    Cpu,
    /// GPU 0 (an NVIDIA GPU with a CUDA 13 driver): the tree is copied to it
    /// on first use and kept there.
    Cuda,
    /// The GPU when one can be used here, else the CPU.
    Auto,
}

impl FromStr for Device {
    type Err = Error;

    fn from_str(name: &str) -> Result<Device> {
        match name {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda),
            "auto" => Ok(Device::Auto),
            _ => Err(Error::InvalidArgument(format!(
                "unknown device {name:?}: expected cpu, cuda or auto"
            ))),
        }
    }
}

/// The most points a leaf and the most children a node may have: far more
/// than pays (a node's children are scanned one by one), few enough that a
/// typo is refused.
pub const FAN_OUT_MAX: usize = 1 << 16;

/// How an [`SsTree`](crate::SsTree) is built.
#[derive(Debug, Clone, Serialize)]
pub struct BuildOptions {
    /// Points per leaf (the last leaf of a group may hold fewer).
    pub leaf_size: usize,
    /// Children per internal node. The seed's 128 is 4 children per lane of
    /// a 32-lane GPU warp; a CPU's lanes are 4 to 16 wide, so 32 is ours.
    pub degree: usize,
    /// How points and nodes are grouped.
    pub build: Build,
    /// The k-means seeding's random seed: the same seed builds the same tree.
    pub seed: u64,
    /// Worker threads (0: every core).
    pub threads: usize,
    /// Lloyd iterations at most per clustering.
    pub kmeans_iterations: usize,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            leaf_size: 64,
            degree: 32,
            build: Build::KMeans,
            seed: 42,
            threads: 0,
            kmeans_iterations: 10,
        }
    }
}

impl BuildOptions {
    /// Refuses options no tree can be built with, naming the field.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            (1..=FAN_OUT_MAX).contains(&self.leaf_size),
            InvalidArgument,
            "leaf_size must be between 1 and {FAN_OUT_MAX}, got {}",
            self.leaf_size
        );
        ensure!(
            (2..=FAN_OUT_MAX).contains(&self.degree),
            InvalidArgument,
            "degree must be between 2 and {FAN_OUT_MAX}, got {}",
            self.degree
        );
        ensure!(
            self.kmeans_iterations >= 1,
            InvalidArgument,
            "kmeans_iterations must be at least 1, got 0"
        );
        spillway_core::check_threads(self.threads, "threads")
    }
}

/// How a batch of queries runs.
#[derive(Debug, Clone, Serialize)]
pub struct QueryOptions {
    /// The search.
    pub method: Method,
    /// Worker threads (0: every core); queries are split between them.
    /// The GPU ignores it.
    pub threads: usize,
    /// Where the batch runs.
    pub device: Device,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            method: Method::Auto,
            threads: 0,
            device: Device::Cpu,
        }
    }
}
