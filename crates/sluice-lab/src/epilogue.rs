//! The one way every experiment ends, once it has measured: its report
//! as `NAME.json` in the output folder (and `NAME.csv` when it has one),
//! the title line `# ...` with the context under it (the machine, each
//! link, the notes, then the experiment's own lines: load, failures),
//! its tables on stdout and together as markdown in `NAME-table.md`, and
//! its plot as `bench-NAME.{svg,png}` in the plot folder.
//!
//! An experiment builds an [`Epilogue`] from what it measured and calls
//! [`Epilogue::finish`] with its report.

use anyhow::Result;
use serde::Serialize;
use sluice_bench::machine::Machine;
use sluice_bench::{plot, report};
use sluice_model::plot::Figure;
use sluice_model::text::Table;

use crate::link::LinkMeasurement;
use crate::setup::PresetOptions;

/// One part of a report's body.
enum Section {
    /// A table after a blank line and its caption (when not empty); it
    /// goes into the markdown file.
    Table { caption: String, table: Table },
    /// Text printed as it is that also goes into the markdown file.
    Text(String),
    /// A line printed only.
    Line(String),
}

/// What an experiment prints and writes once it has run.
pub struct Epilogue<'a> {
    name: &'a str,
    title: String,
    machine: &'a Machine,
    link_label: Option<&'a str>,
    links: &'a [LinkMeasurement],
    notes: &'a [String],
    lines: Vec<String>,
    sections: Vec<Section>,
    markdown: Option<String>,
    csv: Option<String>,
    figure: Option<Figure>,
}

impl<'a> Epilogue<'a> {
    /// The epilogue of the experiment `name` (its files are `NAME.json`,
    /// `NAME-table.md` and `bench-NAME`), titled `# TITLE`, measured on
    /// `machine`, with `notes`.
    pub fn new(
        name: &'a str,
        title: impl Into<String>,
        machine: &'a Machine,
        notes: &'a [String],
    ) -> Self {
        Self {
            name,
            title: title.into(),
            machine,
            link_label: None,
            links: &[],
            notes,
            lines: Vec::new(),
            sections: Vec::new(),
            markdown: Some(format!("{name}-table.md")),
            csv: None,
            figure: None,
        }
    }

    /// The links the servers were behind, as measured; each after
    /// `label i` when a label is given (e.g. "member 0").
    pub fn links(mut self, label: Option<&'a str>, links: &'a [LinkMeasurement]) -> Self {
        self.link_label = label;
        self.links = links;
        self
    }

    /// A line under the notes (load, steal).
    pub fn line(mut self, line: impl Into<String>) -> Self {
        self.lines.push(line.into());
        self
    }

    /// One `failed: ...` line under the notes for each failure.
    pub fn failures(mut self, failures: &[String]) -> Self {
        self.lines
            .extend(failures.iter().map(|f| format!("failed: {f}")));
        self
    }

    /// A table, after a blank line and `caption` (none when empty).
    pub fn table(mut self, caption: impl Into<String>, table: Table) -> Self {
        self.sections.push(Section::Table {
            caption: caption.into(),
            table,
        });
        self
    }

    /// Text between tables, printed as it is and kept in the markdown.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.sections.push(Section::Text(text.into()));
        self
    }

    /// A line after the tables, printed only.
    pub fn after(mut self, line: impl Into<String>) -> Self {
        self.sections.push(Section::Line(line.into()));
        self
    }

    /// The markdown file's name (default `NAME-table.md`); `None`: no
    /// markdown file.
    pub fn markdown_file(mut self, file: Option<String>) -> Self {
        self.markdown = file;
        self
    }

    /// Every run as CSV, written to `NAME.csv` beside the JSON.
    pub fn csv(mut self, text: String) -> Self {
        self.csv = Some(text);
        self
    }

    /// The plot, drawn to `bench-NAME.{svg,png}` in the plot folder.
    pub fn figure(mut self, figure: Figure) -> Self {
        self.figure = Some(figure);
        self
    }

    /// Writes `report` and the files, and prints the report.
    pub fn finish(self, opts: &PresetOptions, report: &impl Serialize) -> Result<()> {
        let name = self.name;
        let json = opts.out_dir.join(format!("{name}.json"));
        report::write_json(&json, report)?;
        match &self.csv {
            Some(text) => {
                let csv = opts.out_dir.join(format!("{name}.csv"));
                report::write_text(&csv, text)?;
                eprintln!("results: {} and {}", json.display(), csv.display());
            }
            None => eprintln!("results: {}", json.display()),
        }
        println!("# {}", self.title);
        print_context(self.machine, self.link_label, self.links, self.notes);
        for l in &self.lines {
            println!("{l}");
        }
        let mut md = String::new();
        let mut tables = false;
        for s in &self.sections {
            match s {
                Section::Table { caption, table } => {
                    println!();
                    if !caption.is_empty() {
                        println!("{caption}");
                    }
                    print!("{}", table.render());
                    if tables {
                        md.push('\n');
                    }
                    md.push_str(&table.markdown());
                    tables = true;
                }
                Section::Text(text) => {
                    print!("{text}");
                    md.push('\n');
                    md.push_str(text);
                }
                Section::Line(line) => println!("{line}"),
            }
        }
        if let (Some(file), true) = (&self.markdown, tables) {
            report::write_text(&opts.out_dir.join(file), &md)?;
        }
        if let Some(figure) = &self.figure {
            plot::draw_or_warn(figure, &opts.plot_dir.join(format!("bench-{name}")));
        }
        Ok(())
    }
}

/// The lines under a report's title: the machine, each link (after
/// `label i` when there are several, e.g. "member 0"), and the notes.
fn print_context(
    machine: &Machine,
    label: Option<&str>,
    links: &[LinkMeasurement],
    notes: &[String],
) {
    println!("machine: {}", machine.line());
    for (i, l) in links.iter().enumerate() {
        match label {
            Some(label) => println!("{label} {i} {}", l.line()),
            None => println!("{}", l.line()),
        }
    }
    for n in notes {
        println!("note: {n}");
    }
}
