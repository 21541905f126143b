use super::*;

fn entry() -> MetaEntry {
    MetaEntry {
        name: "a/b".into(),
        layout: MetaLayout {
            stripe_unit: 65536,
            pieces: vec![MetaPiece {
                server: "sluice://h:1".into(),
                partition: 1,
                object: 7,
            }],
            redundancy: MetaRedundancy::Replicas(1),
        },
        state: MetaState::Ready,
        size: 10,
        attrs: [("k".to_owned(), b"v".to_vec())].into(),
        pending: None,
        revision: 3,
    }
}

/// An entry a put is replacing.
fn replaced() -> MetaEntry {
    let mut e = entry();
    e.pending = Some(MetaLayout {
        stripe_unit: 4096,
        pieces: vec![
            MetaPiece {
                server: "sluice://h:2".into(),
                partition: 1,
                object: 9,
            },
            MetaPiece {
                server: "sluice://h:3".into(),
                partition: 2,
                object: 10,
            },
        ],
        redundancy: MetaRedundancy::Erasure { data: 1, parity: 1 },
    });
    e
}

#[test]
fn lookup_request_bytes() {
    let mut out = Vec::new();
    MetaRequest::Lookup { name: "ab".into() }.encode(&mut out);
    assert_eq!(out, [6, 0, 2, b'a', b'b']);
    assert_eq!(
        MetaRequest::decode(&out).unwrap(),
        MetaRequest::Lookup { name: "ab".into() }
    );
}

#[test]
fn every_message_round_trips() {
    let requests = [
        MetaRequest::AddServer {
            uri: "sluice://h:1".into(),
        },
        MetaRequest::RemoveServer {
            uri: "sluice://h:1".into(),
        },
        MetaRequest::Servers,
        MetaRequest::NextPlacement,
        MetaRequest::Deployment,
        MetaRequest::DefaultRedundancy,
        MetaRequest::SetDefaultRedundancy {
            redundancy: MetaRedundancy::Erasure { data: 4, parity: 2 },
        },
        MetaRequest::Create {
            name: "x".into(),
            layout: entry().layout,
            attrs: entry().attrs,
        },
        MetaRequest::List {
            prefix: "a/".into(),
            after: "a/b".into(),
            max: 5,
        },
        MetaRequest::Update {
            name: "x".into(),
            expected_revision: Some(4),
            update: MetaUpdate {
                state: Some(MetaState::Writing),
                size_at_least: Some(9),
                size: None,
                set_attrs: entry().attrs,
                remove_attrs: vec!["z".into()],
                ..MetaUpdate::default()
            },
        },
        MetaRequest::Update {
            name: "x".into(),
            expected_revision: Some(5),
            update: MetaUpdate {
                pending: MetaPending::Set(replaced().pending.unwrap()),
                ..MetaUpdate::default()
            },
        },
        MetaRequest::Update {
            name: "x".into(),
            expected_revision: Some(6),
            update: MetaUpdate {
                layout: replaced().pending,
                pending: MetaPending::Clear,
                state: Some(MetaState::Ready),
                size: Some(3),
                ..MetaUpdate::default()
            },
        },
        MetaRequest::Delete {
            name: "x".into(),
            expected_revision: None,
        },
    ];
    for req in requests {
        let mut out = Vec::new();
        req.encode(&mut out);
        assert_eq!(MetaRequest::decode(&out).unwrap(), req);
    }
    let replies = [
        MetaReply::Done,
        MetaReply::Servers(vec!["a".into(), "b".into()]),
        MetaReply::Placement(9),
        MetaReply::Deployment("3f2a".into()),
        MetaReply::Redundancy(MetaRedundancy::Replicas(3)),
        MetaReply::Entry(entry()),
        MetaReply::Entry(replaced()),
        MetaReply::Page {
            entries: vec![entry(), replaced(), entry()],
            more: true,
        },
        MetaReply::Failed(MetaFailure::Conflict {
            name: "x".into(),
            expected: 1,
            found: 2,
        }),
        MetaReply::Failed(MetaFailure::ServerInUse {
            server: "s".into(),
            objects: 3,
            example: "x".into(),
        }),
        MetaReply::Failed(MetaFailure::Invalid {
            what: "w".into(),
            why: "y".into(),
        }),
    ];
    for rep in replies {
        let mut out = Vec::new();
        rep.encode(&mut out);
        assert_eq!(MetaReply::decode(&out).unwrap(), rep);
    }
}

#[test]
fn malformed_messages_are_refused() {
    // Truncated, trailing, unknown tags, over-long names, zero page.
    assert!(matches!(
        MetaRequest::decode(&[6, 0, 5, b'a']),
        Err(MetaDecodeError::Truncated(_))
    ));
    assert!(matches!(
        MetaRequest::decode(&[3, 0]),
        Err(MetaDecodeError::Trailing(1))
    ));
    assert!(matches!(
        MetaRequest::decode(&[99]),
        Err(MetaDecodeError::BadTag { .. })
    ));
    assert!(matches!(
        MetaRequest::decode(&[]),
        Err(MetaDecodeError::Truncated(_))
    ));
    let mut long = vec![6, 0x04, 0x01];
    long.extend(std::iter::repeat_n(b'a', 1025));
    assert!(matches!(
        MetaRequest::decode(&long),
        Err(MetaDecodeError::TooLong { len: 1025, .. })
    ));
    let mut zero = Vec::new();
    MetaRequest::List {
        prefix: String::new(),
        after: String::new(),
        max: 0,
    }
    .encode(&mut zero);
    assert_eq!(
        MetaRequest::decode(&zero),
        Err(MetaDecodeError::PageSize(0))
    );
    let mut over = Vec::new();
    MetaRequest::List {
        prefix: String::new(),
        after: String::new(),
        max: MAX_META_PAGE + 1,
    }
    .encode(&mut over);
    let e = MetaRequest::decode(&over).unwrap_err().to_string();
    assert!(e.contains("1025") && e.contains("1 to 1024"), "{e}");
    assert!(matches!(
        MetaRequest::decode(&[6, 0, 1, 0xff]),
        Err(MetaDecodeError::NotUtf8(_))
    ));
    // Attribute keys out of order are not canonical.
    let mut unsorted = vec![REP_ENTRY];
    let mut e = Vec::new();
    put_entry(&entry(), &mut e);
    unsorted.extend(e);
    let ok = MetaReply::decode(&unsorted).unwrap();
    assert_eq!(ok, MetaReply::Entry(entry()));
    let mut two = Vec::new();
    two.extend_from_slice(&2u16.to_be_bytes());
    for k in ["b", "a"] {
        put_str(k, &mut two);
        two.extend_from_slice(&0u32.to_be_bytes());
    }
    assert!(matches!(
        attrs(&mut Reader::new(&two)),
        Err(MetaDecodeError::Unsorted)
    ));
}
