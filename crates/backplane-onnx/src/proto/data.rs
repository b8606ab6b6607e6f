// Written by hand (not generated): the two messages of `onnx-data.proto` (onnx 1.17.0) that
// the ONNX backend test data uses for sequence and optional values. Maps and sparse tensors
// are not modelled; prost skips their fields when decoding.

/// A sequence value: a list of values of one type (here: tensors, sequences or optionals).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct SequenceProto {
    /// The value's name.
    #[prost(string, optional, tag = "1")]
    pub name: ::core::option::Option<::prost::alloc::string::String>,
    /// The elements' kind: 1 tensor, 2 sparse tensor, 3 sequence, 4 map, 5 optional.
    #[prost(int32, optional, tag = "2")]
    pub elem_type: ::core::option::Option<i32>,
    /// The elements, when they are tensors.
    #[prost(message, repeated, tag = "3")]
    pub tensor_values: ::prost::alloc::vec::Vec<TensorProto>,
    /// The elements, when they are sequences.
    #[prost(message, repeated, tag = "5")]
    pub sequence_values: ::prost::alloc::vec::Vec<SequenceProto>,
    /// The elements, when they are optionals.
    #[prost(message, repeated, tag = "7")]
    pub optional_values: ::prost::alloc::vec::Vec<OptionalProto>,
}

/// An optional value: empty, or one value (a tensor, a sequence or an optional).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OptionalProto {
    /// The value's name.
    #[prost(string, optional, tag = "1")]
    pub name: ::core::option::Option<::prost::alloc::string::String>,
    /// The held value's kind: 0 none (empty), 1 tensor, 3 sequence, 5 optional.
    #[prost(int32, optional, tag = "2")]
    pub elem_type: ::core::option::Option<i32>,
    /// The held tensor.
    #[prost(message, optional, tag = "3")]
    pub tensor_value: ::core::option::Option<TensorProto>,
    /// The held sequence.
    #[prost(message, optional, boxed, tag = "5")]
    pub sequence_value: ::core::option::Option<::prost::alloc::boxed::Box<SequenceProto>>,
    /// The held optional.
    #[prost(message, optional, boxed, tag = "7")]
    pub optional_value: ::core::option::Option<::prost::alloc::boxed::Box<OptionalProto>>,
}
