//! Listing a partition's or a collection's objects, and querying a
//! collection's members by attribute ranges.

use rusqlite::params;
use rusqlite::types::Value;

use crate::error::{DbContext, ObjStoreError};
use crate::{ObjectId, ObjectRef, PartitionId};

use super::rows::{check_collection, check_partition, read_attrs};
use super::types::{ListEntry, ListPage, QueryTerm};
use super::ObjectStore;

impl ObjectStore {
    /// Lists the objects of a partition (or of one collection in it) in
    /// id order, after the cursor `after`, at most `limit` of them.
    pub fn list(
        &self,
        partition: PartitionId,
        collection: Option<&str>,
        after: Option<ObjectId>,
        limit: usize,
        with_attrs: bool,
    ) -> Result<ListPage, ObjStoreError> {
        let conn = self.reader();
        match collection {
            Some(name) => check_collection(&conn, partition, name)?,
            None => check_partition(&conn, partition)?,
        }
        let after = after.map_or(-1, |o| o.0 as i64);
        let fetch = limit.saturating_add(1).min(i64::MAX as usize) as i64;
        let mut ids: Vec<i64> = Vec::new();
        {
            let mut stmt = match collection {
                Some(_) => conn.prepare_cached(
                    "SELECT object FROM members WHERE partition = ?1 AND collection = ?2
                     AND object > ?3 ORDER BY object LIMIT ?4",
                ),
                None => conn.prepare_cached(
                    "SELECT id FROM objects WHERE partition = ?1 AND ?2 IS NULL
                     AND id > ?3 ORDER BY id LIMIT ?4",
                ),
            }
            .db("prepare listing")?;
            let mut rows = stmt
                .query(params![partition.0 as i64, collection, after, fetch])
                .db("list objects")?;
            while let Some(row) = rows.next().db("list objects")? {
                ids.push(row.get(0).db("read object id")?);
            }
        }
        let next = if ids.len() > limit {
            ids.truncate(limit);
            ids.last().map(|&id| ObjectId(id as u64))
        } else {
            None
        };
        let mut entries = Vec::with_capacity(ids.len());
        for id in ids {
            let object = ObjectRef {
                partition,
                object: ObjectId(id as u64),
            };
            entries.push(ListEntry {
                object: object.object,
                info: self.current_info(&conn, object)?,
                attrs: if with_attrs {
                    Some(read_attrs(&conn, object, &[])?)
                } else {
                    None
                },
            });
        }
        Ok(ListPage { entries, next })
    }

    /// The members of `collection` whose attributes satisfy every term
    /// (all members when `terms` is empty), in id order. The first
    /// term's range is read from the attribute index.
    pub fn query(
        &self,
        partition: PartitionId,
        collection: &str,
        terms: &[QueryTerm],
    ) -> Result<Vec<ObjectId>, ObjStoreError> {
        let conn = self.reader();
        check_collection(&conn, partition, collection)?;
        let mut values: Vec<Value> = vec![
            Value::Integer(partition.0 as i64),
            Value::Text(collection.to_owned()),
        ];
        let mut sql;
        let term_sql = |alias: &str, term: &QueryTerm, values: &mut Vec<Value>| {
            values.push(Value::Text(term.key.clone()));
            let mut s = format!("{alias}.key = ?{}", values.len());
            let kind = term.min.as_ref().or(term.max.as_ref());
            if let Some(kind) = kind {
                s += &format!(" AND typeof({alias}.value) = '{}'", kind.sql_type());
            }
            if let Some(min) = &term.min {
                values.push(min.to_sql());
                s += &format!(" AND {alias}.value >= ?{}", values.len());
            }
            if let Some(max) = &term.max {
                values.push(max.to_sql());
                s += &format!(" AND {alias}.value <= ?{}", values.len());
            }
            s
        };
        match terms.split_first() {
            None => {
                sql = "SELECT m.object FROM members m WHERE m.partition = ?1 AND m.collection = ?2"
                    .to_owned();
            }
            Some((first, rest)) => {
                let first_sql = term_sql("a", first, &mut values);
                sql = format!(
                    "SELECT a.object FROM attrs a INDEXED BY attrs_by_value
                     JOIN members m ON m.partition = a.partition AND m.collection = ?2 AND m.object = a.object
                     WHERE a.partition = ?1 AND {first_sql}"
                );
                for term in rest {
                    let t = term_sql("b", term, &mut values);
                    sql += &format!(
                        " AND EXISTS (SELECT 1 FROM attrs b WHERE b.partition = a.partition AND b.object = a.object AND {t})"
                    );
                }
            }
        }
        sql += " ORDER BY 1";
        let mut stmt = conn.prepare_cached(&sql).db("prepare query")?;
        let ids = stmt
            .query_map(rusqlite::params_from_iter(values), |r| r.get::<_, i64>(0))
            .db("query")?
            .collect::<Result<Vec<_>, _>>()
            .db("query")?;
        Ok(ids.into_iter().map(|id| ObjectId(id as u64)).collect())
    }
}
