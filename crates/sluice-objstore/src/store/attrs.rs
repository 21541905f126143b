//! Getting, setting and removing user attributes.

use rusqlite::params;

use crate::error::{DbContext, ObjStoreError};
use crate::ObjectRef;

use super::checks::check_attrs;
use super::rows::{put_attrs, read_attrs};
use super::types::{AttrValue, ObjectInfo};
use super::{now, ObjectStore};

impl ObjectStore {
    /// The mandatory attributes and the user attributes `keys` (all of
    /// them when `keys` is empty).
    pub fn get_attrs(
        &self,
        object: ObjectRef,
        keys: &[&str],
    ) -> Result<(ObjectInfo, Vec<(String, AttrValue)>), ObjStoreError> {
        let conn = self.reader();
        let info = self.current_info(&conn, object)?;
        Ok((info, read_attrs(&conn, object, keys)?))
    }

    /// Sets user attributes, all or none; durable on return with
    /// `durable`.
    pub fn set_attrs(
        &self,
        object: ObjectRef,
        attrs: &[(String, AttrValue)],
        durable: bool,
    ) -> Result<(), ObjStoreError> {
        self.update_attrs(object, attrs, &[], durable)
    }

    /// Sets `attrs` and removes the keys `remove` (absent ones are no
    /// error) in one transaction: all or none; durable on return with
    /// `durable`.
    pub fn update_attrs(
        &self,
        object: ObjectRef,
        attrs: &[(String, AttrValue)],
        remove: &[&str],
        durable: bool,
    ) -> Result<(), ObjStoreError> {
        check_attrs(attrs)?;
        let shard = self.shard(object);
        let _guard = shard.write();
        let mut cached = self.cached(shard, object)?;
        let at = now();
        let sets = attrs.to_vec();
        let removes: Vec<String> = remove.iter().map(|k| (*k).to_owned()).collect();
        let result = self.db.commit(durable, move |tx| {
            put_attrs(tx, object, &sets)?;
            let (p, o) = (object.partition.0 as i64, object.object.0 as i64);
            if !removes.is_empty() {
                let mut stmt = tx
                    .prepare_cached(
                        "DELETE FROM attrs WHERE partition = ?1 AND object = ?2 AND key = ?3",
                    )
                    .db("prepare attribute removal")?;
                for key in &removes {
                    stmt.execute(params![p, o, key]).db("remove attribute")?;
                }
            }
            if !sets.is_empty() || !removes.is_empty() {
                tx.prepare_cached(
                    "UPDATE objects SET attrs_modified = ?3 WHERE partition = ?1 AND id = ?2",
                )
                .db("prepare attribute time")?
                .execute(params![p, o, at])
                .db("update attribute time")?;
            }
            Ok(())
        });
        match result {
            Ok(()) => {
                if !attrs.is_empty() || !remove.is_empty() {
                    cached.info.attrs_modified = at;
                }
                shard.keep(object, cached);
                Ok(())
            }
            Err(e) => {
                shard.forget(object);
                Err(e)
            }
        }
    }
}
