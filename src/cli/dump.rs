//! `aotune dump`: what the compiler made of a model.

use super::model_args::ModelArgs;
use aotune_compiler::ir::print_graph;
use aotune_compiler::plan::render_plan;
use aotune_compiler::schedule::render_tasks;
use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Section {
    All,
    /// The imported graph, before any pass.
    Raw,
    /// The optimized IR.
    Ir,
    /// What each pass changed.
    Passes,
    /// Distinct kernel workloads with weight and FLOPs.
    Tasks,
    /// The memory plan (the content of plan.txt).
    Plan,
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// What to print.
    #[arg(long, value_enum, default_value = "all")]
    pub section: Section,
}

pub fn dump(args: DumpArgs) -> anyhow::Result<()> {
    let compiled = args.model.compile()?;
    let mut out = String::new();
    let want =
        |s: Section| args.section == s || (args.section == Section::All && s != Section::Raw);
    if want(Section::Raw) {
        out += &format!("# imported graph\n{}", print_graph(&compiled.imported));
        out.push('\n');
    }
    if want(Section::Ir) {
        out += &format!("# optimized graph\n{}", print_graph(&compiled.graph));
        out.push('\n');
    }
    if want(Section::Passes) {
        out += &format!("# passes\n{}", compiled.report);
        out.push('\n');
    }
    if want(Section::Tasks) {
        out += &format!("# tasks\n{}", render_tasks(&compiled.tasks));
        out.push('\n');
    }
    if want(Section::Plan) {
        out += &format!(
            "# memory plan\n{}",
            render_plan(&compiled.graph, &compiled.plan)
        );
    }
    super::print_stdout(&out)
}
