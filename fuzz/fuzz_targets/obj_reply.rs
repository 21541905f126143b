//! What a client decodes from a server: reply headers, their attribute
//! lists and the CREATE, LIST and QUERY bodies. No panic, no over-read,
//! and what decodes re-encodes through the server's encoders to the same
//! bytes.
//!
//! Input layout: a stream of replies (32-byte header, attribute list,
//! body); a success body is tried as an id list, as a page and as a
//! metadata reply (which re-encodes to the same bytes when it decodes).

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_obj_proto::consts::REPLY_HEADER_LEN;
use sluice_obj_proto::{
    decode_id_list, encode_id_list, encode_page, AttrOps, MetaReply, Page, ReplyHeader,
};

fuzz_target!(|data: &[u8]| {
    let mut stream = data;
    while let Ok(Some(h)) = ReplyHeader::decode(stream) {
        let mut again = Vec::new();
        h.encode(&mut again);
        assert_eq!(again, stream[..REPLY_HEADER_LEN]);
        let end = REPLY_HEADER_LEN as u64 + h.payload_len();
        let Some(rest) = stream.get(REPLY_HEADER_LEN..end as usize) else {
            return;
        };
        let (attrs, body) = rest.split_at(h.attr_len as usize);
        if let Ok(list) = AttrOps::parse(attrs, u32::MAX) {
            let mut again = Vec::new();
            AttrOps::encode(&list.iter().collect::<Vec<_>>(), &mut again);
            assert_eq!(again, attrs);
        }
        if h.status.is_none() {
            if let Ok(ids) = decode_id_list(body) {
                let mut again = Vec::new();
                encode_id_list(&ids, &mut again);
                assert_eq!(again, body);
            }
            if let Ok(meta) = MetaReply::decode(body) {
                let mut again = Vec::new();
                meta.encode(&mut again);
                assert_eq!(again, body, "metadata reply does not re-encode");
            }
            if let Ok(page) = Page::decode(body, 1 << 16) {
                let lists: Vec<Vec<u8>> = page
                    .entries
                    .iter()
                    .map(|e| {
                        let mut v = Vec::new();
                        AttrOps::encode(&e.attrs.iter().collect::<Vec<_>>(), &mut v);
                        v
                    })
                    .collect();
                let entries: Vec<(u64, &[u8])> = page
                    .entries
                    .iter()
                    .zip(&lists)
                    .map(|(e, l)| (e.object, l.as_slice()))
                    .collect();
                let mut again = Vec::new();
                encode_page(page.next, &entries, &mut again);
                assert_eq!(again, body);
            }
        }
        stream = &stream[end as usize..];
    }
});
