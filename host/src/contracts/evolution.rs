//! Evolution: what changed between two editions of one event type's contract, version by
//! version, and whether consumers survive it (`outbox contracts diff OLD NEW`).
//!
//! Owns the rules one level above a schema: a version present in both editions must stay
//! compatible with itself ([`super::compat::diff_schemas`]); a removed version is breaking
//! (producers and handlers still name it); a new version may change anything, since that is
//! how a breaking change is made safely, and is reported against the version before it for
//! the reader. It never reads files (the caller loads both editions) and never decides a
//! verdict on a schema itself.

use serde::Serialize;

use super::compat::{diff_schemas, Compatibility, SchemaDiff};
use super::EventContract;

/// How one version fared between two editions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionDiff {
    /// The version.
    pub version: i32,
    /// `changed` (in both editions), `removed`, or `added`.
    pub change: &'static str,
    /// What this version's change means for consumers: `added` versions are compatible by
    /// definition (their [`against_previous`](Self::against_previous) tells what moved).
    pub verdict: Compatibility,
    /// The schema differences (for `changed`), with path and reason.
    pub schema: Option<SchemaDiff>,
    /// For an `added` version: its schema against the highest older version of the new edition.
    pub against_previous: Option<(i32, SchemaDiff)>,
}

/// The verdict on two editions of one contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContractDiff {
    /// The event type.
    pub event_type: String,
    /// The worst verdict of all versions.
    pub verdict: Compatibility,
    /// Every version that changed, was removed or was added.
    pub versions: Vec<VersionDiff>,
    /// Owner or description changed (never breaking).
    pub metadata_changed: bool,
}

/// Compare `old` and `new`, two editions of one event type's contract.
pub fn diff_contracts(old: &EventContract, new: &EventContract) -> ContractDiff {
    let mut versions = Vec::new();
    for (version, before) in &old.versions {
        match new.versions.get(version) {
            None => versions.push(VersionDiff {
                version: *version,
                change: "removed",
                verdict: Compatibility::Breaking,
                schema: None,
                against_previous: None,
            }),
            Some(after) => {
                let diff = diff_schemas(&before.schema, &after.schema);
                if diff.verdict != Compatibility::Identical {
                    versions.push(VersionDiff {
                        version: *version,
                        change: "changed",
                        verdict: diff.verdict,
                        schema: Some(diff),
                        against_previous: None,
                    });
                }
            }
        }
    }
    for (version, added) in &new.versions {
        if old.versions.contains_key(version) {
            continue;
        }
        let against_previous = new
            .versions
            .range(..*version)
            .next_back()
            .map(|(previous, older)| (*previous, diff_schemas(&older.schema, &added.schema)));
        versions.push(VersionDiff {
            version: *version,
            change: "added",
            verdict: Compatibility::Compatible,
            schema: None,
            against_previous,
        });
    }
    versions.sort_by_key(|v| v.version);
    let metadata_changed = old.owner != new.owner || old.description != new.description;
    let verdict = versions
        .iter()
        .map(|v| v.verdict)
        .max()
        .unwrap_or(Compatibility::Identical)
        .max(if metadata_changed {
            Compatibility::Compatible
        } else {
            Compatibility::Identical
        });
    ContractDiff {
        event_type: new.event_type.clone(),
        verdict,
        versions,
        metadata_changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn contract(dir: &Path, versions: &str) -> EventContract {
        let path = dir.join("mail.welcome.toml");
        std::fs::write(
            &path,
            format!("event_type = \"mail.welcome\"\nowner = \"growth\"\ndescription = \"d\"\n{versions}"),
        )
        .unwrap();
        super::super::load_file(&path).unwrap()
    }

    const V1: &str = "[versions.1.schema]\ntype = \"object\"\nrequired = [\"user_id\"]\nproperties = { user_id = { type = \"integer\" } }\n";

    #[test]
    fn a_version_changed_in_place_is_judged_by_its_schema() {
        let dir = tempfile::tempdir().unwrap();
        let old = contract(dir.path(), V1);
        let same = contract(dir.path(), V1);
        assert_eq!(
            diff_contracts(&old, &same).verdict,
            Compatibility::Identical
        );
        let widened = contract(
            dir.path(),
            "[versions.1.schema]\ntype = \"object\"\nrequired = [\"user_id\"]\nproperties = { user_id = { type = \"integer\" }, locale = { type = \"string\" } }\n",
        );
        assert_eq!(
            diff_contracts(&old, &widened).verdict,
            Compatibility::Compatible
        );
        let retyped = contract(
            dir.path(),
            "[versions.1.schema]\ntype = \"object\"\nrequired = [\"user_id\"]\nproperties = { user_id = { type = \"string\" } }\n",
        );
        let diff = diff_contracts(&old, &retyped);
        assert_eq!(diff.verdict, Compatibility::Breaking);
        assert_eq!(diff.versions[0].change, "changed");
    }

    #[test]
    fn a_new_version_may_break_and_a_removed_one_breaks() {
        let dir = tempfile::tempdir().unwrap();
        let old = contract(dir.path(), V1);
        let with_v2 = contract(
            dir.path(),
            &format!("{V1}[versions.2.schema]\ntype = \"object\"\nrequired = [\"account_id\"]\nproperties = {{ account_id = {{ type = \"string\" }} }}\n"),
        );
        let diff = diff_contracts(&old, &with_v2);
        assert_eq!(diff.verdict, Compatibility::Compatible);
        let added = &diff.versions[0];
        assert_eq!((added.version, added.change), (2, "added"));
        let (previous, against) = added.against_previous.as_ref().unwrap();
        assert_eq!((*previous, against.verdict), (1, Compatibility::Breaking));
        let back = diff_contracts(&with_v2, &old);
        assert_eq!(back.verdict, Compatibility::Breaking);
        assert_eq!(back.versions[0].change, "removed");
    }
}
