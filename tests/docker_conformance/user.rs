//! executors/docker/internal/user/user_test.go (`FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR`): whether
//! the job image's user is root, and the id read from `id -u` / `id -g`. drover runs the
//! command with its standard error discarded, so the parser sees standard output only, as
//! upstream's does. The cases where the Engine call itself fails (the inspect, the exec) end as
//! system failures in drover's job code and are not part of this table.

use drover::executor::image::{image_user_is_root, user_id_from_output};

use super::Tally;

const FILE: &str = "executors/docker/internal/user/user_test.go";

pub fn user_tables(t: &mut Tally) {
    for (case, user, want) in [
        ("empty Config", "", true),
        ("empty user entry in Config", "", true),
        ("user entry in Config set to root", "root", true),
        ("user entry in Config set to non-root", "non-root", false),
    ] {
        let got = image_user_is_root(user);
        t.check(
            FILE,
            &format!("TestDefaultInspect_IsRoot/{case}"),
            got == want,
            || format!("got {got}, want {want}"),
        );
    }
    // (case, standard output, the id or None for an error)
    let rows: &[(&str, &str, Option<u32>)] = &[
        ("ID parsing error", "\n\ntest\n\n", None),
        (
            "err output mixed with expected stdout output",
            "\n\n123\n\n",
            Some(123),
        ),
        ("empty output of the id command", "\n\n\n\n", None),
        ("proper ID received from output", "\n\n123\n\n", Some(123)),
        ("blank lines", "  \n  \n  ", None),
        (
            "empty lines received at the end of the output",
            "1000 \n \n",
            Some(1000),
        ),
        (
            "ID received at the end of the output",
            "\nHello world\n1000",
            Some(1000),
        ),
    ];
    for function in ["TestDefaultInspect_UID", "TestDefaultInspect_GID"] {
        for (case, stdout, want) in rows {
            let got = user_id_from_output(stdout).ok();
            t.check(FILE, &format!("{function}/{case}"), got == *want, || {
                format!("got {got:?}, want {want:?}")
            });
        }
    }
}
