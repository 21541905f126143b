//! Bad input gives a typed error that says what is wrong; the JSON report
//! has the shape other tools read.

use sluice_model::{
    approximate_mva, bounds, exact_mva, exact_mva_multiclass, mva_report, ApproxOptions,
    Approximation, Calibration, ClosedNetwork, CustomerClass, ModelError, MulticlassNetwork,
    MulticlassStation, Station, StationObservation,
};

#[test]
fn network_errors() {
    assert_eq!(ClosedNetwork::new(vec![], 1.0), Err(ModelError::NoStations));
    let e = ClosedNetwork::from_demands(&[1.0, -0.5], &[], 0.0).unwrap_err();
    assert!(
        matches!(e, ModelError::BadDemand { ref station, value } if station == "q2" && value == -0.5)
    );
    assert!(
        e.to_string().contains("q2") && e.to_string().contains("-0.5"),
        "{e}"
    );
    assert!(matches!(
        ClosedNetwork::from_demands(&[f64::NAN], &[], 0.0),
        Err(ModelError::BadDemand { .. })
    ));
    assert!(matches!(
        ClosedNetwork::from_demands(&[1.0], &[], -1.0),
        Err(ModelError::BadThinkTime { .. })
    ));
    assert_eq!(
        ClosedNetwork::from_demands(&[0.0], &[0.0], 0.0),
        Err(ModelError::ZeroCycleTime)
    );
    assert!(matches!(
        ClosedNetwork::new(
            vec![Station::queueing("a", 1.0), Station::queueing("a", 2.0)],
            0.0
        ),
        Err(ModelError::DuplicateStation { .. })
    ));
    assert!(matches!(
        ClosedNetwork::new(vec![Station::load_dependent("a", 1.0, vec![1.0, 0.0])], 0.0),
        Err(ModelError::BadRate { customers: 2, .. })
    ));
    assert!(matches!(
        ClosedNetwork::new(vec![Station::load_dependent("a", 1.0, vec![])], 0.0),
        Err(ModelError::NoRates { .. })
    ));
}

#[test]
fn solver_errors() {
    let net = ClosedNetwork::from_demands(&[1.0], &[], 0.0).unwrap();
    assert_eq!(exact_mva(&net, 0), Err(ModelError::ZeroCustomers));
    assert!(ModelError::ZeroCustomers.to_string().contains("customers"));
    assert_eq!(bounds(&net, 0), Err(ModelError::ZeroCustomers));
    assert_eq!(
        approximate_mva(&net, 0, Approximation::Schweitzer, ApproxOptions::default()),
        Err(ModelError::ZeroCustomers)
    );
    assert!(matches!(
        exact_mva(&net, u32::MAX),
        Err(ModelError::TooLarge { .. })
    ));
    let ld = ClosedNetwork::new(vec![Station::multi_server("m", 1.0, 2)], 0.0).unwrap();
    assert!(matches!(
        bounds(&ld, 2),
        Err(ModelError::Unsupported { .. })
    ));
    assert!(matches!(
        approximate_mva(&ld, 2, Approximation::Bard, ApproxOptions::default()),
        Err(ModelError::Unsupported { .. })
    ));
    let tight = ApproxOptions {
        tolerance: 0.0,
        max_iterations: 3,
    };
    let net3 = ClosedNetwork::from_demands(&[1.0, 2.0], &[], 1.0).unwrap();
    assert!(matches!(
        approximate_mva(&net3, 5, Approximation::Schweitzer, tight),
        Err(ModelError::NotConverged { iterations: 3, .. })
    ));
}

#[test]
fn multiclass_errors() {
    let st = || {
        vec![
            MulticlassStation::queueing("a"),
            MulticlassStation::queueing("b"),
        ]
    };
    assert!(matches!(
        MulticlassNetwork::new(st(), vec![CustomerClass::new("x", 1, 0.0, vec![1.0])]),
        Err(ModelError::ClassShape {
            got: 1,
            expected: 2,
            ..
        })
    ));
    assert_eq!(
        MulticlassNetwork::new(st(), vec![]),
        Err(ModelError::NoClasses)
    );
    assert_eq!(
        MulticlassNetwork::new(st(), vec![CustomerClass::new("x", 0, 0.0, vec![1.0, 1.0])]),
        Err(ModelError::ZeroCustomers)
    );
    let big = MulticlassNetwork::new(
        st(),
        (0..6)
            .map(|i| CustomerClass::new(format!("c{i}"), 100, 0.0, vec![1.0, 1.0]))
            .collect(),
    )
    .unwrap();
    assert!(matches!(
        exact_mva_multiclass(&big),
        Err(ModelError::TooLarge { .. })
    ));
}

#[test]
fn calibration_errors_and_values() {
    let obs = |busy: f64| StationObservation {
        name: "disk".into(),
        busy_seconds: busy,
        servers: 1,
        delay: false,
    };
    let cal = Calibration {
        interval_seconds: 10.0,
        completions: 200,
        stations: vec![obs(5.0)],
    };
    // U = 0.5, X = 20/s, D = U/X = 25 ms.
    let d = cal.demands().unwrap();
    assert!((d[0].utilization - 0.5).abs() < 1e-15);
    assert!((d[0].demand - 0.025).abs() < 1e-15);
    assert!((cal.throughput().unwrap() - 20.0).abs() < 1e-12);
    let zero = Calibration {
        completions: 0,
        ..cal.clone()
    };
    assert!(zero
        .demands()
        .unwrap_err()
        .to_string()
        .contains("no completions"));
    let over = Calibration {
        stations: vec![obs(12.0)],
        ..cal.clone()
    };
    assert!(over
        .demands()
        .unwrap_err()
        .to_string()
        .contains("utilization above 1"));
    let neg = Calibration {
        stations: vec![obs(-1.0)],
        ..cal.clone()
    };
    assert!(neg.demands().is_err());
    let t0 = Calibration {
        interval_seconds: 0.0,
        ..cal
    };
    assert!(t0.demands().is_err());
}

/// `sluice model mva --json` prints exactly this object.
#[test]
fn mva_report_json_shape() {
    let net = ClosedNetwork::from_demands(&[0.605, 2.1, 1.35], &[0.5], 15.0).unwrap();
    let r = mva_report(&net, 3, None).unwrap();
    let v: serde_json::Value = serde_json::to_value(&r).unwrap();
    for key in ["throughput", "response_time"] {
        assert!(v[key].is_f64(), "{key}");
    }
    for key in ["queue_lengths", "utilizations", "residence_times"] {
        let a = v[key].as_array().unwrap();
        assert_eq!(a.len(), 4, "{key}: queueing stations then delay");
    }
    assert_eq!(v["stations"], serde_json::json!(["q1", "q2", "q3", "d1"]));
    for kind in ["asymptotic", "balanced_job"] {
        for q in ["throughput", "response_time"] {
            let iv = v["bounds"][kind][q].as_array().unwrap();
            assert_eq!(iv.len(), 2);
            assert!(iv[0].as_f64().unwrap() <= iv[1].as_f64().unwrap());
        }
    }
    // Residence time of the delay station is its demand.
    assert_eq!(v["residence_times"][3], serde_json::json!(0.5));
    let back: sluice_model::MvaReport = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);
}

#[test]
fn network_serde_checks_on_the_way_in() {
    let ok: ClosedNetwork = serde_json::from_str(
        r#"{"stations":[{"name":"cpu","demand":1.0,"kind":"queueing"},
                        {"name":"m","demand":2.0,"kind":"load_dependent","rates":[1,2]}],
            "think_time":3}"#,
    )
    .unwrap();
    assert_eq!(ok.stations().len(), 2);
    let bad = serde_json::from_str::<ClosedNetwork>(
        r#"{"stations":[{"name":"cpu","demand":-1.0,"kind":"queueing"}]}"#,
    );
    assert!(bad.unwrap_err().to_string().contains("service demand"));
}
