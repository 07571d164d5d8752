//! The codec of every generated service and client: prost's, except that a message that
//! does not decode is the caller's fault (`INVALID_ARGUMENT`), not the server's
//! (`INTERNAL`, prost's codec's answer).

use std::marker::PhantomData;

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

pub struct ProtoCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for ProtoCodec<T, U> {
    fn default() -> Self {
        ProtoCodec(ProstCodec::default())
    }
}

impl<T, U> Codec for ProtoCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProtoDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProtoDecoder(self.0.decoder(), PhantomData)
    }
}

pub struct ProtoDecoder<U>(ProstDecoder<U>, PhantomData<U>);

impl<U: prost::Message + Default> Decoder for ProtoDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            Status::invalid_argument(format!("malformed message: {}", status.message()))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
