//! The domain's wire enums (`wire_enum!`) as PostgreSQL `text` columns: a row field or a bound
//! parameter can be the enum itself, and a stored string no variant spells fails to decode
//! (with the value in the error) rather than passing on as a string.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};
use sqlx::{Decode, Encode, Postgres, Type};

use crate::domain::bes::Phase;
use crate::domain::job::{AllTasksComplete, JobState, TaskFailureMode, TaskState};
use crate::domain::pool::{
    AllocationState, JobDefaultOrder, NodeCommunicationMode, NodeDeallocationOption, NodeFillType,
    NodeState, PoolState,
};
use crate::domain::schedule::JobScheduleState;
use crate::domain::waits::WaitCode;

macro_rules! text_enum {
    ($($name:ty),+ $(,)?) => {$(
        impl Type<Postgres> for $name {
            fn type_info() -> PgTypeInfo {
                <&str as Type<Postgres>>::type_info()
            }

            fn compatible(ty: &PgTypeInfo) -> bool {
                <&str as Type<Postgres>>::compatible(ty)
            }
        }

        impl PgHasArrayType for $name {
            fn array_type_info() -> PgTypeInfo {
                <&str as PgHasArrayType>::array_type_info()
            }
        }

        impl Encode<'_, Postgres> for $name {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as Encode<Postgres>>::encode(self.as_str(), buf)
            }
        }

        impl Decode<'_, Postgres> for $name {
            fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
                let text = <&str as Decode<Postgres>>::decode(value)?;
                <$name>::parse(text).ok_or_else(|| {
                    format!("{text:?} is not a {}", stringify!($name)).into()
                })
            }
        }
    )+};
}

text_enum!(
    TaskState,
    JobState,
    JobScheduleState,
    AllTasksComplete,
    TaskFailureMode,
    PoolState,
    AllocationState,
    NodeFillType,
    JobDefaultOrder,
    NodeCommunicationMode,
    NodeDeallocationOption,
    NodeState,
    Phase,
    WaitCode,
);
