//! Our `.proto` files against etcd 3.7.3's own: the same messages, fields (name, number, label,
//! type, packing), enums and values, services and methods, for every file we generate code from.
//!
//! Options and comments are left out on both sides: ours carry none (etcd's gogoproto,
//! HTTP-gateway, OpenAPI and version annotations do not change the wire), so both sides are
//! parsed, their options dropped (all but `packed` and `allow_alias`, which do matter), the
//! imports that only brought those options dropped with them, and then compiled with protox,
//! so that every type name is resolved the same way on both sides. A type that only a dropped
//! import could give makes the compile fail, loudly.
//!
//! etcd's files come from the Go module cache (`go.etcd.io/etcd/api/v3@v3.7.3` and
//! `go.etcd.io/etcd/server/v3@v3.7.3`, where v3election and v3lock live). When they are not
//! there, `scripts/etcd-go.sh 3.7.3` (which fetches them to build etcd) is run, and then
//! `go mod download` (the script skips the fetch when its etcd binary is cached already). Without
//! Go or the modules the test fails: it is the check that our API is the one users' servers
//! speak, and a skipped check would say nothing.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use protox::file::{File, FileResolver};
use protox::prost_reflect::{Cardinality, DescriptorPool, Kind};

/// The etcd release whose API ours must match: the newest one users run (it adds RangeStream).
const ETCD_VERSION: &str = "3.7.3";

/// Our files, each with the path etcd's module has it at (`api/` or `server/` module), in the
/// order they import each other.
const FILES: &[(&str, Module, &str)] = &[
    ("mvccpb/kv.proto", Module::Api, "mvccpb/kv.proto"),
    ("authpb/auth.proto", Module::Api, "authpb/auth.proto"),
    (
        "etcdserverpb/rpc.proto",
        Module::Api,
        "etcdserverpb/rpc.proto",
    ),
    (
        "v3electionpb/v3election.proto",
        Module::Server,
        "etcdserver/api/v3election/v3electionpb/v3election.proto",
    ),
    (
        "v3lockpb/v3lock.proto",
        Module::Server,
        "etcdserver/api/v3lock/v3lockpb/v3lock.proto",
    ),
];

/// The packages those files declare: only their items are compared.
const PACKAGES: &[&str] = &[
    "mvccpb",
    "authpb",
    "etcdserverpb",
    "v3electionpb",
    "v3lockpb",
];

/// Options that change what goes on the wire, or whether a file compiles at all: kept. Every
/// other option (gogoproto's, `google.api.http`, OpenAPI, `versionpb.etcd_version_*`,
/// `go_package`, `deprecated`) is dropped.
const WIRE_OPTIONS: &[&str] = &["packed", "allow_alias"];

/// Which of etcd's Go modules a file is in.
#[derive(Clone, Copy, Debug)]
enum Module {
    Api,
    Server,
}

impl Module {
    fn path(self) -> &'static str {
        match self {
            Module::Api => "go.etcd.io/etcd/api/v3",
            Module::Server => "go.etcd.io/etcd/server/v3",
        }
    }
}

#[test]
fn our_protos_match_etcd_3_7_3() {
    let modules = etcd_modules();
    let ours_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let ours: HashMap<String, PathBuf> = FILES
        .iter()
        .map(|(name, _, _)| (name.to_string(), ours_dir.join(name)))
        .collect();
    // etcd imports its own files as `etcd/api/<path>` (api module); the server module's files
    // are only opened, never imported, so any unique name does for them.
    let theirs: HashMap<String, PathBuf> = FILES
        .iter()
        .map(|&(_, module, path)| {
            let dir = match module {
                Module::Api => &modules.0,
                Module::Server => &modules.1,
            };
            (etcd_name(module, path), dir.join(path))
        })
        .collect();
    let ours_names: Vec<String> = FILES.iter().map(|(n, _, _)| n.to_string()).collect();
    let theirs_names: Vec<String> = FILES
        .iter()
        .map(|&(_, module, path)| etcd_name(module, path))
        .collect();

    let ours = model(&compile(ours, &ours_names));
    let theirs = model(&compile(theirs, &theirs_names));
    // The model is not empty: a walk that found nothing would compare equal.
    assert!(
        ours.iter().any(|l| l == "method etcdserverpb.KV.Range"),
        "the model lacks KV.Range: {ours:?}"
    );
    assert!(ours.len() > 300, "only {} items in our model", ours.len());

    let only_ours: Vec<&String> = ours.difference(&theirs).collect();
    let only_theirs: Vec<&String> = theirs.difference(&ours).collect();
    assert!(
        only_ours.is_empty() && only_theirs.is_empty(),
        "our protos differ from etcd {ETCD_VERSION}'s:\n  only ours:\n    {}\n  \
         only etcd's:\n    {}",
        join(&only_ours),
        join(&only_theirs)
    );
}

/// The name etcd's own imports give a file of `module` at `path`.
fn etcd_name(module: Module, path: &str) -> String {
    match module {
        Module::Api => format!("etcd/api/{path}"),
        Module::Server => format!("etcd/server/{path}"),
    }
}

fn join(lines: &[&String]) -> String {
    if lines.is_empty() {
        return "(none)".into();
    }
    lines
        .iter()
        .map(|l| l.as_str())
        .collect::<Vec<_>>()
        .join("\n    ")
}

/// The directories of etcd's api and server modules at [`ETCD_VERSION`] in the Go module cache,
/// fetched when missing.
fn etcd_modules() -> (PathBuf, PathBuf) {
    let cache = go(&["env", "GOMODCACHE"]);
    let dir =
        |module: Module| Path::new(cache.trim()).join(format!("{}@v{ETCD_VERSION}", module.path()));
    let (api, server) = (dir(Module::Api), dir(Module::Server));
    if api.is_dir() && server.is_dir() {
        return (api, server);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/etcd-go.sh");
    eprintln!("proto_parity: etcd {ETCD_VERSION}'s modules are not in {cache}; running {script}");
    let status = Command::new(script)
        .arg(ETCD_VERSION)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        status.success(),
        "{script} {ETCD_VERSION} failed ({status})"
    );
    if !(api.is_dir() && server.is_dir()) {
        // The script found its binary cached and fetched nothing: fetch the two modules alone.
        let api_module = format!("{}@v{ETCD_VERSION}", Module::Api.path());
        let server_module = format!("{}@v{ETCD_VERSION}", Module::Server.path());
        go(&["mod", "download", &api_module, &server_module]);
    }
    assert!(
        api.is_dir() && server.is_dir(),
        "etcd {ETCD_VERSION}'s modules are still missing: {} {}",
        api.display(),
        server.display()
    );
    (api, server)
}

/// Run `go` with `args` (outside any module, so no go.mod nearby changes what it does) and
/// return its stdout; panics with its stderr when it fails.
fn go(args: &[&str]) -> String {
    let output = Command::new("go")
        .args(args)
        .current_dir(std::env::temp_dir())
        .env("GOFLAGS", "-mod=mod")
        .output()
        .unwrap_or_else(|e| panic!("run go {args:?} (Go is needed for this check): {e}"));
    assert!(
        output.status.success(),
        "go {args:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("go prints UTF-8")
}

/// Compile `open` (names in `files`) with every option but [`WIRE_OPTIONS`] dropped.
fn compile(files: HashMap<String, PathBuf>, open: &[String]) -> DescriptorPool {
    let mut compiler = protox::Compiler::with_file_resolver(Stripped { files });
    compiler.include_imports(true);
    compiler
        .open_files(open)
        .unwrap_or_else(|e| panic!("compile {open:?}: {e:?}"));
    compiler.descriptor_pool()
}

/// Serves exactly the files compared, parsed, with their options stripped and the imports
/// that are not among them dropped (they only bring option definitions).
struct Stripped {
    files: HashMap<String, PathBuf>,
}

impl FileResolver for Stripped {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        let path = self
            .files
            .get(name)
            .ok_or_else(|| protox::Error::file_not_found(name))?;
        let source = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut file = File::from_source(name, &source)?
            .file_descriptor_proto()
            .clone();
        strip_imports(&mut file, |import| self.files.contains_key(import));
        strip_file(&mut file);
        Ok(File::from_file_descriptor_proto(file))
    }
}

/// Drop the imports `keep` refuses, and renumber the public and weak imports that point into
/// the list.
fn strip_imports(file: &mut prost_types::FileDescriptorProto, keep: impl Fn(&str) -> bool) {
    let old = std::mem::take(&mut file.dependency);
    let mut index = HashMap::new();
    for (i, import) in old.into_iter().enumerate() {
        if keep(&import) {
            index.insert(i as i32, file.dependency.len() as i32);
            file.dependency.push(import);
        }
    }
    let renumber = |list: &mut Vec<i32>| {
        *list = list.iter().filter_map(|i| index.get(i).copied()).collect();
    };
    renumber(&mut file.public_dependency);
    renumber(&mut file.weak_dependency);
}

/// Whether an option as parsed (not yet interpreted) is one of [`WIRE_OPTIONS`].
fn is_wire(option: &prost_types::UninterpretedOption) -> bool {
    let wire = |part: &prost_types::uninterpreted_option::NamePart| {
        !part.is_extension && WIRE_OPTIONS.contains(&part.name_part.as_str())
    };
    matches!(option.name.as_slice(), [part] if wire(part))
}

/// Keep only the wire options of an options message; `None` when none is left.
macro_rules! keep_wire {
    ($options:expr) => {
        if let Some(options) = &mut $options {
            options.uninterpreted_option.retain(is_wire);
            if options.uninterpreted_option.is_empty() && *options == Default::default() {
                $options = None;
            }
        }
    };
}

fn strip_file(file: &mut prost_types::FileDescriptorProto) {
    keep_wire!(file.options);
    file.message_type.iter_mut().for_each(strip_message);
    file.enum_type.iter_mut().for_each(strip_enum);
    for service in &mut file.service {
        keep_wire!(service.options);
        for method in &mut service.method {
            keep_wire!(method.options);
        }
    }
}

fn strip_message(message: &mut prost_types::DescriptorProto) {
    // map_entry is set by the parser itself (not an option written in the file): kept.
    keep_wire!(message.options);
    for field in message.field.iter_mut().chain(message.extension.iter_mut()) {
        keep_wire!(field.options);
    }
    for oneof in &mut message.oneof_decl {
        keep_wire!(oneof.options);
    }
    message.nested_type.iter_mut().for_each(strip_message);
    message.enum_type.iter_mut().for_each(strip_enum);
}

fn strip_enum(e: &mut prost_types::EnumDescriptorProto) {
    keep_wire!(e.options);
    for value in &mut e.value {
        keep_wire!(value.options);
    }
}

/// One line per item of our packages: what a difference is reported as.
fn model(pool: &DescriptorPool) -> BTreeSet<String> {
    let ours = |package: &str| PACKAGES.contains(&package);
    let mut lines = BTreeSet::new();
    for file in pool.files().filter(|f| ours(f.package_name())) {
        lines.insert(format!(
            "file of package {} is {:?}",
            file.package_name(),
            file.syntax()
        ));
    }
    for message in pool.all_messages().filter(|m| ours(m.package_name())) {
        let name = message.full_name();
        lines.insert(format!("message {name}"));
        for field in message.fields() {
            let kind = match field.kind() {
                Kind::Message(m) => format!("message {}", m.full_name()),
                Kind::Enum(e) => format!("enum {}", e.full_name()),
                scalar => format!("{scalar:?}"),
            };
            let oneof = field
                .containing_oneof()
                .map(|o| format!(" in oneof {}", o.name()))
                .unwrap_or_default();
            // prost-reflect works `is_packed` out before it reads the options: an explicit
            // `packed` is taken from the options themselves.
            let explicit = field
                .field_descriptor_proto()
                .options
                .as_ref()
                .and_then(|o| o.packed);
            let packed = field.is_list() && explicit.unwrap_or(field.is_packed());
            lines.insert(format!(
                "field {name}.{} = {} {} {kind}{}{oneof}{}",
                field.name(),
                field.number(),
                cardinality(field.cardinality()),
                if packed { " packed" } else { "" },
                if field.supports_presence() {
                    " with presence"
                } else {
                    ""
                },
            ));
        }
    }
    for e in pool.all_enums().filter(|e| ours(e.package_name())) {
        let name = e.full_name();
        lines.insert(format!("enum {name}"));
        for value in e.values() {
            lines.insert(format!(
                "value {name}.{} = {}",
                value.name(),
                value.number()
            ));
        }
    }
    for service in pool.services().filter(|s| ours(s.package_name())) {
        let name = service.full_name();
        lines.insert(format!("service {name}"));
        for method in service.methods() {
            let stream = |on: bool| if on { "stream " } else { "" };
            lines.insert(format!("method {name}.{}", method.name()));
            lines.insert(format!(
                "method {name}.{}({}{}) returns ({}{})",
                method.name(),
                stream(method.is_client_streaming()),
                method.input().full_name(),
                stream(method.is_server_streaming()),
                method.output().full_name(),
            ));
        }
    }
    lines
}

fn cardinality(cardinality: Cardinality) -> &'static str {
    match cardinality {
        Cardinality::Optional => "optional",
        Cardinality::Required => "required",
        Cardinality::Repeated => "repeated",
    }
}

/// The comparison sees what it is for: a field renumbered, a type changed, a method made a
/// stream and an enum value added each show up, and options (even unknown ones) do not.
#[test]
fn the_model_tells_wire_changes_and_ignores_options() {
    let dir = tempfile::tempdir().expect("temp dir");
    let compiled = |source: &str| {
        let path = dir.path().join("t.proto");
        std::fs::write(&path, source).expect("write t.proto");
        let files = HashMap::from([("t.proto".to_string(), path)]);
        model(&compile(files, &["t.proto".to_string()]))
    };
    let base = "syntax = \"proto3\"; package etcdserverpb; import \"gogoproto/gogo.proto\";
        enum E { A = 0; } message M { int64 f = 1; repeated int64 r = 2; }
        service S { rpc R(M) returns (M); }";
    let with_options = "syntax = \"proto3\"; package etcdserverpb;
        option go_package = \"x\"; option (gogoproto.marshaler_all) = true;
        enum E { option (versionpb.etcd_version_enum) = \"3.5\"; A = 0; }
        message M { int64 f = 1 [(gogoproto.nullable) = false]; repeated int64 r = 2; }
        service S { rpc R(M) returns (M) { option (google.api.http) = { post: \"/r\" }; } }";
    assert_eq!(compiled(base), compiled(with_options));
    for changed in [
        base.replace("int64 f = 1", "int64 f = 3"),
        base.replace("int64 f = 1", "uint64 f = 1"),
        base.replace(
            "repeated int64 r = 2;",
            "repeated int64 r = 2 [packed = false];",
        ),
        base.replace("returns (M)", "returns (stream M)"),
        base.replace("A = 0;", "A = 0; B = 1;"),
    ] {
        assert_ne!(compiled(base), compiled(&changed), "{changed}");
    }
}
