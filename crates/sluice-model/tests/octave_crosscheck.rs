//! Cross-check against an independent solver: GNU Octave's queueing
//! package (Moreno Marzolla), run as `octave-cli --eval 'pkg load queueing; ...'`.
//!
//! Random networks (fixed seed, so a failure reproduces) are solved here and
//! by `qncsmva` (single class, queueing and delay centres, think time),
//! `qncsmvald` (load-dependent centres), `qncsmvaap` (Schweitzer) and
//! `qncmmva` (multiclass). Any disagreement fails the test. When octave or
//! its queueing package is missing the test says it is skipped and passes,
//! except under scripts/test (which installs them), where it fails.
//!
//! Install: `apt-get install -y --no-install-recommends octave octave-queueing`
//! (Debian 12: 82 MB download, 266 MB on disk, about 15 s here).

use std::fmt::Write as _;
use std::process::Command;

use fastrand::Rng;

use sluice_model::{
    approximate_mva, exact_mva, exact_mva_multiclass, ApproxOptions, Approximation, ClosedNetwork,
    CustomerClass, MulticlassNetwork, MulticlassStation, Station,
};

/// Uniform in `lo..hi`.
fn uniform(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.f64()
}

fn vec_lit(v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|x| format!("{x:.17e}")).collect();
    format!("[{}]", items.join(" "))
}

/// Runs `script` after `pkg load queueing`; `None` when octave or the
/// package is not there.
fn octave(script: &str) -> Option<String> {
    let out = Command::new(sluice_testkit::programs::find("octave-cli")?)
        .args(["--no-gui", "--norc", "--quiet", "--eval"])
        .arg(format!("pkg load queueing; {script}"))
        .output()
        .ok()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || !stdout.contains("END") {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("package") && stderr.contains("queueing") {
            return None;
        }
        panic!(
            "octave-cli failed (status {}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
    }
    Some(stdout)
}

fn octave_available() -> bool {
    let Some(octave) = sluice_testkit::programs::program_or_skip("octave-cli") else {
        return false;
    };
    let ok = Command::new(octave)
        .args(["--no-gui", "--norc", "--quiet", "--eval"])
        .arg("pkg load queueing; disp(42)")
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("42"))
        .unwrap_or(false);
    if !ok {
        let msg = "octave's queueing package is not installed (Debian: octave-queueing); \
                   scripts/test installs it";
        assert!(!sluice_testkit::programs::required(), "{msg}");
        eprintln!("skipped: {msg}");
    }
    ok
}

/// Parses lines `TAG i v1 v2 ...` into (tag, i, values).
fn parse(out: &str) -> Vec<(String, usize, Vec<f64>)> {
    out.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let tag = it.next()?.to_owned();
            if !matches!(tag.as_str(), "S" | "L" | "A" | "M") {
                return None;
            }
            let i = it.next()?.parse().ok()?;
            let vals = it
                .map(|t| t.parse::<f64>().expect("octave printed a number"))
                .collect();
            Some((tag, i, vals))
        })
        .collect()
}

fn assert_close(what: &str, ours: f64, theirs: f64, rel: f64) {
    let tol = rel * theirs.abs().max(1e-9);
    assert!(
        (ours - theirs).abs() <= tol,
        "{what}: sluice-model {ours} vs octave {theirs} (|diff| {} > {tol})",
        (ours - theirs).abs()
    );
}

struct Case {
    net: ClosedNetwork,
    n: u32,
}

fn random_single(rng: &mut Rng, load_dependent: bool) -> Case {
    let kq = 1 + rng.u64(..6) as usize;
    let kd = rng.u64(..3) as usize;
    let mut stations = Vec::new();
    for i in 0..kq {
        let d = uniform(rng, 0.001, 10.0);
        if load_dependent && rng.u64(..2) == 0 {
            let rates = (0..1 + rng.u64(..4))
                .map(|j| (j + 1) as f64 * uniform(rng, 0.5, 1.0))
                .collect();
            stations.push(Station::load_dependent(format!("q{i}"), d, rates));
        } else {
            stations.push(Station::queueing(format!("q{i}"), d));
        }
    }
    for i in 0..kd {
        stations.push(Station::delay(format!("d{i}"), uniform(rng, 0.0, 20.0)));
    }
    let z = if rng.u64(..4) == 0 {
        0.0
    } else {
        uniform(rng, 0.0, 50.0)
    };
    Case {
        net: ClosedNetwork::new(stations, z).expect("valid by construction"),
        n: 1 + rng.u64(..if load_dependent { 30 } else { 120 }) as u32,
    }
}

#[test]
fn agrees_with_octave_queueing() {
    if !octave_available() {
        return;
    }
    let mut rng = Rng::with_seed(0x05EE_D0F5_1001_CE00);
    let single: Vec<Case> = (0..60).map(|_| random_single(&mut rng, false)).collect();
    let ld: Vec<Case> = (0..30).map(|_| random_single(&mut rng, true)).collect();
    let mut script = String::from("format long; ");
    let emit = "printf(' %.17g', X(1), sum(R), Q, U); printf('\\n');";
    for (i, c) in single.iter().enumerate() {
        let d: Vec<f64> = c.net.stations().iter().map(|s| s.demand).collect();
        let m: Vec<f64> = c
            .net
            .stations()
            .iter()
            .map(|s| if s.is_delay() { -1.0 } else { 1.0 })
            .collect();
        let k = d.len();
        write!(
            script,
            "[U,R,Q,X]=qncsmva({n},{d},ones(1,{k}),{m},{z:.17e}); printf('S {i}'); {emit} \
             [U,R,Q,X]=qncsmvaap({n},{d},ones(1,{k}),{m},{z:.17e},1e-13,100000); printf('A {i}'); {emit} ",
            n = c.n,
            d = vec_lit(&d),
            m = vec_lit(&m),
            z = c.net.think_time(),
        )
        .unwrap();
    }
    for (i, c) in ld.iter().enumerate() {
        // S(k, j): mean service time with j customers present = D / rate(j);
        // a delay centre is D / j.
        let k = c.net.stations().len();
        let mut rows = Vec::new();
        for s in c.net.stations() {
            let row: Vec<f64> = (1..=c.n as usize)
                .map(|j| match &s.kind {
                    sluice_model::StationKind::LoadDependent { rates } => {
                        s.demand / rates[(j - 1).min(rates.len() - 1)]
                    }
                    sluice_model::StationKind::Delay => s.demand / j as f64,
                    _ => s.demand,
                })
                .collect();
            rows.push(vec_lit(&row).trim_matches(['[', ']']).to_owned());
        }
        write!(
            script,
            "[U,R,Q,X]=qncsmvald({n},[{rows}],ones(1,{k}),{z:.17e}); printf('L {i}'); printf(' %.17g', X(1), sum(R), Q); printf('\\n'); ",
            n = c.n,
            rows = rows.join("; "),
            z = c.net.think_time(),
        )
        .unwrap();
    }
    // Multiclass: 2-3 classes, small populations.
    let mut multi = Vec::new();
    for i in 0..20 {
        let k = 1 + rng.u64(..4) as usize;
        let c = 2 + rng.u64(..2) as usize;
        let delay: Vec<bool> = (0..k).map(|j| j > 0 && rng.u64(..4) == 0).collect();
        let stations: Vec<MulticlassStation> = (0..k)
            .map(|j| {
                if delay[j] {
                    MulticlassStation::delay(format!("s{j}"))
                } else {
                    MulticlassStation::queueing(format!("s{j}"))
                }
            })
            .collect();
        let classes: Vec<CustomerClass> = (0..c)
            .map(|j| {
                CustomerClass::new(
                    format!("c{j}"),
                    1 + rng.u64(..6) as u32,
                    if rng.u64(..3) == 0 {
                        0.0
                    } else {
                        uniform(&mut rng, 0.0, 20.0)
                    },
                    (0..k).map(|_| uniform(&mut rng, 0.01, 5.0)).collect(),
                )
            })
            .collect();
        let net = MulticlassNetwork::new(stations, classes).unwrap();
        let s_rows: Vec<String> = net
            .classes()
            .iter()
            .map(|cl| vec_lit(&cl.demands).trim_matches(['[', ']']).to_owned())
            .collect();
        let pops: Vec<f64> = net
            .classes()
            .iter()
            .map(|c| f64::from(c.population))
            .collect();
        let zs: Vec<f64> = net.classes().iter().map(|c| c.think_time).collect();
        let ms: Vec<f64> = delay.iter().map(|&d| if d { -1.0 } else { 1.0 }).collect();
        write!(
            script,
            "[U,R,Q,X]=qncmmva({pops},[{s}],ones({c},{k}),{ms},{zs}); printf('M {i}'); printf(' %.17g', X(:,1), sum(Q,1)); printf('\\n'); ",
            pops = vec_lit(&pops),
            s = s_rows.join("; "),
            ms = vec_lit(&ms),
            zs = vec_lit(&zs),
        )
        .unwrap();
        multi.push(net);
    }
    script.push_str("disp('END');");

    let Some(out) = octave(&script) else {
        eprintln!("SKIPPED: the octave queueing package could not be loaded");
        return;
    };
    let lines = parse(&out);
    let mut checked = 0;
    for (tag, i, v) in &lines {
        match tag.as_str() {
            "S" => {
                let c = &single[*i];
                let s = exact_mva(&c.net, c.n).unwrap();
                let k = c.net.stations().len();
                assert_eq!(v.len(), 2 + 2 * k, "S {i}: {v:?}");
                let what = |q: &str| {
                    format!(
                        "qncsmva case {i} (N={}, Z={}): {q}",
                        c.n,
                        c.net.think_time()
                    )
                };
                assert_close(&what("X"), s.throughput, v[0], 1e-9);
                assert_close(&what("R"), s.response_time, v[1], 1e-9);
                for j in 0..k {
                    assert_close(
                        &what(&format!("Q[{j}]")),
                        s.stations[j].queue_length,
                        v[2 + j],
                        1e-8,
                    );
                    assert_close(
                        &what(&format!("U[{j}]")),
                        s.stations[j].utilization,
                        v[2 + k + j],
                        1e-8,
                    );
                }
            }
            "A" => {
                let c = &single[*i];
                let s = approximate_mva(
                    &c.net,
                    c.n,
                    Approximation::Schweitzer,
                    ApproxOptions::default(),
                )
                .unwrap();
                // Octave stops on its own tolerance; agree to 1e-6.
                assert_close(&format!("qncsmvaap case {i}: X"), s.throughput, v[0], 1e-6);
                assert_close(
                    &format!("qncsmvaap case {i}: R"),
                    s.response_time,
                    v[1],
                    1e-6,
                );
            }
            "L" => {
                let c = &ld[*i];
                let s = exact_mva(&c.net, c.n).unwrap();
                let what = |q: &str| format!("qncsmvald case {i} (N={}): {q}", c.n);
                assert_close(&what("X"), s.throughput, v[0], 1e-7);
                assert_close(&what("R"), s.response_time, v[1], 1e-7);
                for (j, st) in s.stations.iter().enumerate() {
                    assert_close(&what(&format!("Q[{j}]")), st.queue_length, v[2 + j], 1e-6);
                }
            }
            "M" => {
                let net = &multi[*i];
                let s = exact_mva_multiclass(net).unwrap();
                let c = net.classes().len();
                for (j, cl) in s.classes.iter().enumerate() {
                    assert_close(
                        &format!("qncmmva case {i}: X[{j}]"),
                        cl.throughput,
                        v[j],
                        1e-9,
                    );
                }
                for (j, st) in s.stations.iter().enumerate() {
                    assert_close(
                        &format!("qncmmva case {i}: Q[{j}]"),
                        st.queue_length,
                        v[c + j],
                        1e-8,
                    );
                }
            }
            _ => unreachable!(),
        }
        checked += 1;
    }
    assert_eq!(
        checked,
        2 * single.len() + ld.len() + multi.len(),
        "octave printed fewer results than cases:\n{out}"
    );
    eprintln!("octave cross-check: {checked} cases agree");
}
