//! Workloads as plug-ins: a scenario's `workload: Name((...))` names one of `crate::REGISTRY`
//! and holds its parameters. A workload is one module with a parameter struct implementing
//! [`Params`] and a `static KIND: Kind<ItsParams>`, plus one registry line; the scenario schema,
//! `--set workload.name=...` and reports pick it up with no other edit.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::Workload;

/// The cluster a workload is prepared for (some draw over every node's rows, TPC-C gives each
/// coordinator a terminal).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub nodes: u16,
    pub workers: u16,
    pub coroutines: u32,
}

/// A workload's parameters, as the scenario file spells them.
pub trait Params:
    Serialize + DeserializeOwned + Default + Clone + fmt::Debug + PartialEq + Send + Sync + 'static
{
    /// Checks the values; on error, the field (as in the file) and the problem.
    fn validate(&self) -> Result<(), (&'static str, String)>;
    /// The generator for a cluster of this shape.
    fn build(&self, shape: Shape) -> Arc<dyn Workload>;
    /// The tables a cluster of this shape holds (memory estimates, before anything is built):
    /// override when `build` does work that grows with the rows.
    fn tables(&self, shape: Shape) -> Vec<crate::Table> {
        self.build(shape).tables()
    }
}

/// A registered workload: its scenario name, the name reports print, a one-line description.
pub struct Kind<P> {
    /// The variant name in scenario files (`SmallBank`); any capitalisation is accepted.
    pub name: &'static str,
    /// For reports (`TPC-C`).
    pub title: &'static str,
    pub description: &'static str,
    params: PhantomData<fn() -> P>,
}

impl<P> Kind<P> {
    pub const fn new(name: &'static str, title: &'static str, description: &'static str) -> Kind<P> {
        Kind { name, title, description, params: PhantomData }
    }
}

/// A registry entry, whatever its parameter type.
pub trait WorkloadKind: Sync {
    fn name(&self) -> &'static str;
    fn title(&self) -> &'static str;
    fn description(&self) -> &'static str;
    /// Reads this workload's parameters from a scenario (any serde format; RON keeps its line
    /// and column in errors).
    fn parse(&'static self, d: &mut dyn erased_serde::Deserializer<'_>) -> Result<WorkloadConfig, erased_serde::Error>;
    /// Every parameter at its default.
    fn default_config(&'static self) -> WorkloadConfig;
}

pub type WorkloadKindRef = &'static dyn WorkloadKind;

impl<P: Params> WorkloadKind for Kind<P> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn title(&self) -> &'static str {
        self.title
    }
    fn description(&self) -> &'static str {
        self.description
    }
    fn parse(&'static self, d: &mut dyn erased_serde::Deserializer<'_>) -> Result<WorkloadConfig, erased_serde::Error> {
        let p: P = erased_serde::deserialize(d)?;
        Ok(WorkloadConfig { kind: self, params: Box::new(p) })
    }
    fn default_config(&'static self) -> WorkloadConfig {
        WorkloadConfig { kind: self, params: Box::new(P::default()) }
    }
}

/// [`Params`] behind a pointer: what a scenario holds.
pub trait DynParams: erased_serde::Serialize + fmt::Debug + Send + Sync {
    fn validate(&self) -> Result<(), (&'static str, String)>;
    fn build(&self, shape: Shape) -> Arc<dyn Workload>;
    fn tables(&self, shape: Shape) -> Vec<crate::Table>;
    fn clone_box(&self) -> Box<dyn DynParams>;
    fn as_any(&self) -> &dyn Any;
    fn eq_dyn(&self, other: &dyn DynParams) -> bool;
}

erased_serde::serialize_trait_object!(DynParams);

impl<P: Params> DynParams for P {
    fn validate(&self) -> Result<(), (&'static str, String)> {
        Params::validate(self)
    }
    fn build(&self, shape: Shape) -> Arc<dyn Workload> {
        Params::build(self, shape)
    }
    fn tables(&self, shape: Shape) -> Vec<crate::Table> {
        Params::tables(self, shape)
    }
    fn clone_box(&self) -> Box<dyn DynParams> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn eq_dyn(&self, other: &dyn DynParams) -> bool {
        other.as_any().downcast_ref::<P>() == Some(self)
    }
}

/// A workload and its parameters, as a scenario names them.
pub struct WorkloadConfig {
    pub kind: WorkloadKindRef,
    pub params: Box<dyn DynParams>,
}

impl WorkloadConfig {
    /// The parameters as their own type, if this is that workload.
    pub fn params<P: Params>(&self) -> Option<&P> {
        self.params.as_any().downcast_ref()
    }
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        self.params.validate()
    }
    pub fn build(&self, shape: Shape) -> Arc<dyn Workload> {
        self.params.build(shape)
    }
    /// The tables a cluster of this shape holds, without building the generator.
    pub fn tables(&self, shape: Shape) -> Vec<crate::Table> {
        self.params.tables(shape)
    }
}

impl Clone for WorkloadConfig {
    fn clone(&self) -> Self {
        WorkloadConfig { kind: self.kind, params: self.params.clone_box() }
    }
}

impl fmt::Debug for WorkloadConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:?})", self.kind.name(), self.params)
    }
}

impl PartialEq for WorkloadConfig {
    fn eq(&self, other: &Self) -> bool {
        self.kind.name() == other.kind.name() && self.params.eq_dyn(&*other.params)
    }
}

/// Names compare ignoring case and anything but letters and digits (`tpc-c` is `Tpcc`).
pub fn fold(name: &str) -> String {
    name.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect()
}

/// The registered workload called `name` (any capitalisation or punctuation).
pub fn named(name: &str) -> Option<WorkloadKindRef> {
    let f = fold(name);
    crate::REGISTRY.iter().copied().find(|k| fold(k.name()) == f || fold(k.title()) == f)
}

/// Every registered workload's scenario name.
pub fn names() -> Vec<&'static str> {
    crate::REGISTRY.iter().map(|k| k.name()).collect()
}
