//! The schema (what the loader accepts) and the serde model (what the rest of drover reads)
//! must agree key for key: a file that sets every schema key loads, no value is lost on the way
//! into the model, and the model serialises back exactly the schema's keys.

use super::load_str;
use super::schema::{Kind, Schema, ROOT};

/// A value of `kind` that differs from every default.
fn sample(kind: Kind) -> toml::Value {
    use toml::Value as V;
    match kind {
        Kind::Str => V::String("x".into()),
        Kind::Int => V::Integer(7),
        Kind::Float => V::Float(1.5),
        Kind::Bool => V::Boolean(true),
        Kind::Duration => V::String("1m30s".into()),
        Kind::Datetime => V::String("2024-01-31T12:00:00Z".into()),
        Kind::StrList | Kind::StrOrList => V::Array(vec![V::String("a".into())]),
        Kind::StrMap => V::Table(toml::Table::from_iter([(
            "key1".to_string(),
            V::String("v".into()),
        )])),
        Kind::BoolMap => V::Table(toml::Table::from_iter([(
            "FF_X".to_string(),
            V::Boolean(true),
        )])),
        Kind::StrListMap => V::Table(toml::Table::from_iter([(
            "k".to_string(),
            V::Array(vec![V::String("/dev/x".into())]),
        )])),
        Kind::Table(s) => V::Table(full_table(s)),
        Kind::TableList(s) => V::Array(vec![V::Table(full_table(s))]),
        Kind::Raw => V::Table(toml::Table::from_iter([("k".to_string(), V::Integer(1))])),
    }
}

/// The value a key gets when [`sample`]'s would not pass validation.
fn valid_sample(title: &str, key: &str) -> Option<toml::Value> {
    let s = |v: &str| toml::Value::String(v.into());
    Some(match (title, key) {
        ("[[runners.machine.autoscaling]]", "Periods") => {
            toml::Value::Array(vec![s("* * * * * * *")])
        }
        ("[[runners.machine.autoscaling]]", "Timezone") => s("UTC"),
        ("the top level", "log_level") => s("info"),
        ("the top level", "log_format") => s("json"),
        ("[runners.machine]", "MachineOptionsWithName") => toml::Value::Array(vec![s("opt=%s")]),
        ("[runners.machine]", "MachineName") => s("auto-%s"),
        (
            "[runners.docker]",
            "memory"
            | "memory_swap"
            | "memory_reservation"
            | "service_memory"
            | "service_memory_swap"
            | "service_memory_reservation",
        ) => s("1g"),
        ("[runners.docker]", "cpus" | "service_cpus") => s("1.5"),
        ("[runners.docker]", "cpuset_cpus" | "cpuset_mems" | "service_cpuset_cpus") => s("0-1"),
        _ => return None,
    })
}

fn full_table(schema: &'static Schema) -> toml::Table {
    let mut t = toml::Table::new();
    for f in schema.fields {
        let v = valid_sample(schema.title, f.name).unwrap_or_else(|| sample(f.kind));
        t.insert(f.name.to_string(), v);
    }
    t
}

/// Every schema key appears in `value` (the serialised model) and nothing else does.
fn compare(schema: &'static Schema, value: &toml::Value, path: &str, problems: &mut Vec<String>) {
    let Some(table) = value.as_table() else {
        problems.push(format!("{path}: not a table"));
        return;
    };
    for f in schema.fields {
        let sub = format!("{path}.{}", f.name);
        match (table.get(f.name), f.kind) {
            (None, _) => problems.push(format!("{sub}: missing from the model")),
            (Some(v), Kind::Table(s)) => compare(s, v, &sub, problems),
            (Some(v), Kind::TableList(s)) => match v.as_array().and_then(|a| a.first()) {
                Some(first) => compare(s, first, &sub, problems),
                None => problems.push(format!("{sub}: empty list")),
            },
            (Some(v), kind) => {
                let expected = valid_sample(schema.title, f.name).unwrap_or_else(|| sample(kind));
                let same = match (kind, v) {
                    // Durations come back as nanoseconds.
                    (Kind::Duration, toml::Value::Integer(n)) => *n == 90_000_000_000,
                    (Kind::Datetime, toml::Value::String(s)) => {
                        s.starts_with("2024-01-31T12:00:00")
                    }
                    _ => *v == expected || f.name == "Periods",
                };
                if !same {
                    problems.push(format!(
                        "{sub}: value {v:?} came back, {expected:?} went in"
                    ));
                }
            }
        }
    }
    for key in table.keys() {
        if !schema.fields.iter().any(|f| f.name == key) {
            problems.push(format!("{path}.{key}: in the model but not in the schema"));
        }
    }
}

#[test]
fn schema_and_model_agree_key_for_key() {
    let doc = full_table(&ROOT);
    let text = toml::to_string(&doc).expect("sample serialises");
    let loaded = match load_str(&text, "all-keys.toml") {
        Ok(l) => l,
        Err(e) => panic!("a file with every key must load:\n{e}\n{text}"),
    };
    let stray: Vec<_> = loaded
        .warnings
        .iter()
        .filter(|w| {
            w.message.contains("unknown key")
                || w.message.contains("is read as")
                || w.message.contains("key is ignored")
        })
        .collect();
    assert!(
        stray.is_empty(),
        "every schema key must be known: {stray:#?}"
    );
    let back = toml::Value::try_from(&loaded.config).expect("model serialises");
    let mut problems = Vec::new();
    compare(&ROOT, &back, "", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
}
